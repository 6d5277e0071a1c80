"""Synthetic runs for `shopcomp view`: realistic, deterministic results files of any size.

``write_synthetic_run(run_dir, n_episodes)`` writes what ``shopcomp eval`` leaves behind, without a
model, an index or a judge, so the viewer's benchmark (benchmarks/bench_viewer.py) and its tests can
ask for 10,000 episodes (or one of several MB) in seconds:

- ``<run_dir>/results.jsonl``: one :class:`~shopping_companion.types.EpisodeResult` per line, built
  through the pydantic models (so every line validates): two stages of ``turns`` assistant turns each,
  with ``<think>`` text, ``mem_search`` / ``mem_view`` (stage 1) and ``product_search`` /
  ``product_view`` (stage 2) calls whose JSON results are about ``result_chars`` characters, the
  returned ids (needle and haystack sessions; reference, alternative and other products), the rule
  judge's verdicts with reasons, reward breakdowns (``R_z``, ``R_tool``, ``R_fmt``, ``per_tool_call``)
  and the scripted simulator's record. About 40 % of the episodes fail, 2 % end with an episode error,
  some turns carry format errors, some stages end at ``max_turns``;
- ``<bench_dir>/tasks.jsonl``, ``sessions.jsonl`` and ``manifest.json`` (with the files' SHA-256, so
  :func:`shopping_companion.assembly.data.load_benchmark` accepts it): one
  :class:`~shopping_companion.types.Task` per distinct task id of the run;
- ``<run_dir>/config.yaml``: a valid :class:`~shopping_companion.benchmark.run_config.EvalConfig`
  whose ``bench.path`` is the benchmark directory (absolute), so the viewer can find the tasks.

Episodes are spread over tasks, trials and strategies so that every ``(task_id, trial, mode, hint)``
key occurs once. The same arguments give byte-identical files (``wall_s`` and latencies come from the
seeded generator, not from the clock).

``write_large_episode(run_dir)`` writes a run of one episode with ~200 turns (several MB), for the
episode page's worst case. ``payload`` (both functions) plants a string (for example a ``<script>``
element) in the instruction, think text, tool arguments and results, answer, verdict reasons and
simulator feedback of the first episode, for escaping tests.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopping_companion.benchmark.run_config import BenchmarkSelection, EvalConfig, OutputConfig
from shopping_companion.config import dump_yaml
from shopping_companion.runs import file_sha256
from shopping_companion.types import (
    EpisodeResult,
    FormatFlags,
    Message,
    Preference,
    ProductSlot,
    RewardBreakdown,
    Session,
    SessionRef,
    StageResult,
    Step,
    Task,
    ToolCall,
    ToolResult,
    Trajectory,
    Turn,
    Verdict,
    Voucher,
)

__all__ = ["SyntheticRun", "synthetic_tasks", "write_large_episode", "write_synthetic_run"]

_WORDS = (
    "comfortable lightweight breathable cotton durable everyday classic slim regular fit washable soft sturdy "
    "compact stainless steel ceramic wooden leather canvas waterproof adjustable portable premium organic "
    "handmade vintage modern minimal bright pastel matte glossy warm cool evening office travel kitchen garden"
).split()
_TYPES = [
    ("sneakers", ["Footwear", "Men", "Casual Shoes"], "colour", ["white", "black", "navy", "grey"]),
    ("kurta", ["Apparel", "Women", "Ethnic Wear"], "fabric", ["cotton", "silk", "rayon", "linen"]),
    ("backpack", ["Accessories", "Bags", "Backpacks"], "colour", ["black", "olive", "blue", "maroon"]),
    ("wall clock", ["Home", "Decor", "Clocks"], "material", ["wood", "metal", "plastic", "glass"]),
    ("frying pan", ["Kitchen", "Cookware", "Pans"], "material", ["cast iron", "stainless steel", "aluminium"]),
    ("bookshelf", ["Furniture", "Storage", "Shelves"], "colour", ["white", "oak", "walnut", "black"]),
    ("wrist watch", ["Accessories", "Watches", "Analog"], "strap", ["leather", "metal", "silicone"]),
    ("green tea", ["Grocery", "Beverages", "Tea"], "flavour", ["jasmine", "mint", "lemon", "plain"]),
]
_SHOPS = ["myntra:roadster", "myntra:puma", "ikea:ikea", "bigbasket:tata", "amazon:anker", "amazon:solimo"]
_SYSTEM = (
    "You are a shopping assistant. Stage {stage}: use the tools to {goal}. Think inside <think>...</think>, "
    "call tools with <tool_call>{{...}}</tool_call> and finish with <answer>...</answer>. "
) * 6


_GENERATOR = "benchmarks/viewer_synth.py v2"


@dataclass(frozen=True)
class SyntheticRun:
    """Where a synthetic run was written and what it holds.

    ``run_dir``: the run directory (``results.jsonl``, ``config.yaml``); ``bench_dir``: the benchmark
    directory its config names; ``results``: the results file; ``n_episodes``: lines written;
    ``task_ids``: the benchmark's task ids in order; ``bytes``: size of the results file.
    """

    run_dir: Path
    bench_dir: Path
    results: Path
    n_episodes: int
    task_ids: list[str]
    bytes: int


def _text(rng: random.Random, n_chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < n_chars:
        w = rng.choice(_WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n_chars]


def _sid(task_idx: int, k: int) -> str:
    return f"synth-u{task_idx:05d}-s{k:03d}"


def synthetic_tasks(n_tasks: int, *, seed: int = 0, payload: str | None = None) -> tuple[list[Task], list[Session]]:
    """``n_tasks`` valid tasks (about one in four an add-on deal with a voucher and a budget) and the
    sessions they reference (12 per user, 2 of them needles), deterministic in ``seed``.

    ``payload``, when given, is appended to the first task's instruction. Raises ValueError for
    ``n_tasks < 1``."""
    if n_tasks < 1:
        raise ValueError(f"n_tasks must be >= 1 (got {n_tasks})")
    rng = random.Random(f"tasks-{seed}")
    tasks: list[Task] = []
    sessions: list[Session] = []
    for i in range(n_tasks):
        ptype, cats, attr, values = _TYPES[i % len(_TYPES)]
        addon = i % 4 == 3
        n_slots = 2 if addon else 1
        shop = rng.choice(_SHOPS)
        slots = [
            ProductSlot(product_type=ptype, category_path=cats, reference_product_id=f"synth:{i:05d}-ref{s}")
            for s in range(n_slots)
        ]
        prefs = [
            Preference(slot=s, attribute=attr, value=rng.choice(values)) for s in range(n_slots) for _ in range(1)
        ] + [Preference(slot=0, attribute="price band", value=rng.choice(["budget", "mid-range", "premium"]))]
        if rng.random() < 0.5:
            prefs.append(Preference(slot=0, attribute="pattern", value="floral", polarity="avoid"))
        history = [SessionRef(session_id=_sid(i, k), date=f"2024-{1 + k % 12:02d}-{1 + k:02d}") for k in range(12)]
        needles = [_sid(i, 3), _sid(i, 8)]
        instruction = (
            f"I am looking for {ptype if not addon else 'two items to go with my ' + ptype} for "
            f"{rng.choice(['my brother', 'the new flat', 'a trip', 'work', 'my mother'])}; "
            f"{_text(rng, 90)}. You know what I like."
        )
        if payload and i == 0:
            instruction += " " + payload
        tasks.append(
            Task(
                task_id=f"synth-{i:05d}",
                task_type="addon" if addon else "single",
                split="test",
                instruction=instruction,
                user_id=f"synth-u{i:05d}",
                history=history,
                needle_session_ids=needles,
                preferences=prefs,
                slots=slots,
                voucher=Voucher(shop_id=shop, min_spend=1500.0, discount=200.0) if addon else None,
                budget=4000.0 if addon else None,
                currency="INR",
                seed=seed,
                n_alternatives=rng.randint(0, 6),
            )
        )
        for ref in history:
            is_needle = ref.session_id in needles
            said = (
                f"I always go for {prefs[0].value} when it comes to {attr}."
                if is_needle
                else _text(rng, 60).capitalize() + "."
            )
            sessions.append(
                Session(
                    session_id=ref.session_id,
                    date=ref.date,
                    source="synthetic",
                    turns=[Turn(role="user", content=said), Turn(role="assistant", content=_text(rng, 80))],
                )
            )
    return tasks, sessions


def _existing_bench(bench_dir: Path, bench_seed: int, payload: str | None) -> int:
    """Tasks of a benchmark this module wrote in ``bench_dir`` with the same seed and payload (0: none)."""
    try:
        m = json.loads((bench_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    same = m.get("generator") == _GENERATOR and m.get("seed") == bench_seed and m.get("payload") == payload
    return int(m.get("n_tasks", 0)) if same and (bench_dir / "tasks.jsonl").is_file() else 0


def _write_bench(bench_dir: Path, tasks: list[Task], sessions: list[Session], seed: int, payload: str | None) -> None:
    bench_dir.mkdir(parents=True, exist_ok=True)
    (bench_dir / "tasks.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in tasks), encoding="utf-8")
    (bench_dir / "sessions.jsonl").write_text(
        "".join(s.model_dump_json() + "\n" for s in sorted(sessions, key=lambda s: s.session_id)), encoding="utf-8"
    )
    manifest = {
        "generator": _GENERATOR,
        "seed": seed,
        "payload": payload,
        "n_tasks": len(tasks),
        "files": {name: file_sha256(bench_dir / name) for name in ("tasks.jsonl", "sessions.jsonl")},
    }
    (bench_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")


class _Episode:
    """Builds one episode of a task (all randomness from ``rng``)."""

    def __init__(self, task: Task, rng: random.Random, *, turns: int, result_chars: int, payload: str | None):
        self.task, self.rng, self.turns, self.result_chars, self.payload = task, rng, turns, result_chars, payload
        self.idx = int(task.task_id.rsplit("-", 1)[1])

    def _plant(self, text: str) -> str:
        return text + " " + self.payload if self.payload else text

    def _think(self, what: str) -> str:
        return f"<think>{self._plant(what + ' ' + _text(self.rng, self.rng.randint(150, 600)))}</think>"

    def _mem_search(self, n: int) -> tuple[dict, dict, list[str], float]:
        rng = self.rng
        k = rng.choice([5, 8, 10])
        ids = [_sid(self.idx, rng.randrange(12)) for _ in range(k)]
        hits = []
        per = max(80, self.result_chars // k - 120)
        for rank, sid in enumerate(ids):
            hits.append(
                {
                    "session_id": sid,
                    "turn_index": rng.randrange(6),
                    "role": "user",
                    "date": "2024-03-01",
                    "score": round(0.9 - rank * 0.05, 4),
                    "snippet": _text(rng, per),
                    "query": f"what does the user like {n}",
                }
            )
        args = {"queries": [self._plant(f"{self.task.slots[0].product_type} preferences"), "favourite colour"]}
        gold = set(self.task.needle_session_ids)
        r_u = sum(s in gold for s in ids) / len(ids)
        return args, {"results": hits, "n_results": len(hits)}, ids, r_u

    def _mem_view(self) -> tuple[dict, dict, list[str], float]:
        rng = self.rng
        ids = sorted({rng.choice(self.task.needle_session_ids), _sid(self.idx, rng.randrange(12))})
        per = max(100, self.result_chars // (2 * len(ids)))
        sessions = [
            {
                "session_id": sid,
                "date": "2024-03-01",
                "turns": [
                    {"role": "user", "content": self._plant(_text(rng, per))},
                    {"role": "assistant", "content": _text(rng, per)},
                ],
            }
            for sid in ids
        ]
        gold = set(self.task.needle_session_ids)
        return {"session_ids": ids}, {"sessions": sessions}, ids, sum(s in gold for s in ids) / len(ids)

    def _product_ids(self, k: int) -> list[str]:
        rng = self.rng
        refs = self.task.reference_product_ids
        ids = [f"synth:{self.idx:05d}-p{rng.randrange(400):03d}" for _ in range(k)]
        if rng.random() < 0.6:
            ids[rng.randrange(k)] = rng.choice(refs)
        if rng.random() < 0.3:
            ids[rng.randrange(k)] = f"synth:{self.idx:05d}-alt{rng.randrange(3)}"
        return list(dict.fromkeys(ids))

    def _record(self, pid: str, detail: bool) -> dict[str, Any]:
        rng = self.rng
        task = self.task
        slot = task.slots[0]
        attr = next((p for p in task.preferences if p.polarity == "want"), task.preferences[0])
        good = pid in task.reference_product_ids or "-alt" in pid
        rec: dict[str, Any] = {
            "product_id": pid,
            "title": f"{rng.choice(_WORDS).title()} {slot.product_type} {rng.choice(_WORDS)}",
            "price": float(rng.randrange(199, 3999)),
            "currency": "INR",
            "category": slot.category_path[-1],
            "shop": "Synthetic Retail (India)",
            "shop_id": task.voucher.shop_id if task.voucher and good else rng.choice(_SHOPS),
            "brand": rng.choice(["Roadster", "Puma", "Solimo", "Tata"]),
        }
        if detail:
            rec["category_path"] = slot.category_path
            rec["description"] = _text(rng, max(60, self.result_chars // 6))
            rec["features"] = [_text(rng, 40) for _ in range(3)]
            rec["attributes"] = {
                attr.attribute: attr.value if good else rng.choice(_WORDS),
                "price band": rng.choice(["budget", "mid-range", "premium"]),
                "usage": rng.choice(["casual", "formal", "sports"]),
            }
            rec["options"] = {"size": ["S", "M", "L"]}
        else:
            rec["score"] = round(rng.uniform(5, 25), 4)
        return rec

    def _product_search(self) -> tuple[dict, dict, list[str], float]:
        rng = self.rng
        ids = self._product_ids(rng.choice([5, 8, 10]))
        hits = [self._record(pid, detail=False) for pid in ids]
        pad = self.result_chars - len(json.dumps(hits))
        for h in hits:  # search hits are short; titles carry the rest of the budget
            h["title"] += " " + _text(rng, max(0, pad // len(hits)))
        args: dict[str, Any] = {"query": self._plant(f"{self.task.slots[0].product_type} {_text(rng, 20)}")}
        if self.task.voucher:
            args["shop_id"] = self.task.voucher.shop_id
        good = set(self.task.reference_product_ids)
        return args, {"results": hits, "n_results": len(hits)}, ids, float(any(i in good for i in ids))

    def _product_view(self, seen: list[str]) -> tuple[dict, dict, list[str], float]:
        rng = self.rng
        ids = (seen or self._product_ids(3))[: rng.choice([1, 2, 3])]
        good = set(self.task.reference_product_ids)
        return (
            {"product_ids": ids},
            {"products": [self._record(pid, detail=True) for pid in ids]},
            ids,
            sum(i in good or "-alt" in i for i in ids) / len(ids),
        )

    def stage(self, stage: int, success: bool, *, mode: str) -> tuple[StageResult, list[str]]:
        """One judged stage; returns it and the product ids it saw (stage 2) or [] (stage 1)."""
        rng, task = self.rng, self.task
        goal = "recover the user's preferences from memory" if stage == 1 else "find products that satisfy them"
        messages = [
            Message(role="system", content=_SYSTEM.format(stage=stage, goal=goal)),
            Message(role="user", content=task.instruction),
        ]
        steps: list[Step] = []
        per_call: list[float] = []
        seen: list[str] = []
        hit_limit = not success and rng.random() < 0.25
        n_turns = self.turns if hit_limit else max(2, self.turns - rng.randrange(0, max(1, self.turns // 3)))
        for t in range(n_turns):
            last = t == n_turns - 1 and not hit_limit
            flags = FormatFlags(n_think_blocks=1, n_answers=0)
            if last:
                answer = self._answer(stage, seen)
                text = self._think("I have enough to answer.") + f"\n<answer>{answer}</answer>"
                flags = FormatFlags(has_answer=True, n_answers=1, n_think_blocks=1)
                steps.append(self._step(text, [], [], flags))
                messages.append(Message(role="assistant", content=text))
                continue
            if stage == 1:
                name = "mem_search" if t % 3 != 2 else "mem_view"
                args, payload, ids, r_u = self._mem_search(t) if name == "mem_search" else self._mem_view()
            else:
                name = "product_search" if t % 2 == 0 or not seen else "product_view"
                args, payload, ids, r_u = (
                    self._product_search() if name == "product_search" else self._product_view(seen)
                )
                seen.extend(i for i in ids if i not in seen)
            call = ToolCall(name=name, arguments=args, call_id=f"call_{stage}_{t}")
            content = json.dumps(payload, ensure_ascii=False, separators=(", ", ": "))
            if self.payload and t == 0:
                content = content[:-1] + ", " + json.dumps({"note": self.payload})[1:]
            error = None
            if rng.random() < 0.04:  # a rejected call: error observation, r(u) = 0
                content = json.dumps({"error": f"{name}: unknown argument 'limit'; allowed: {sorted(args)}"})
                error, ids, r_u = "unknown argument 'limit'", [], 0.0
                args = {**args, "limit": 5}
                call = ToolCall(name=name, arguments=args, call_id=call.call_id)
            if rng.random() < 0.05:
                flags = FormatFlags(think_ok=False, n_think_blocks=2, errors=["more than one <think> block in a turn"])
            text = (
                self._think(f"Turn {t}: next I call {name}.")
                + f"\n<tool_call>{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}</tool_call>"
            )
            res = ToolResult(call_id=call.call_id, name=name, content=content, returned_ids=ids, error=error)
            steps.append(self._step(text, [call], [res], flags))
            messages.append(Message(role="assistant", content=text))
            messages.append(Message(role="tool", content=content, tool_call_id=call.call_id, name=name))
            per_call.append(round(r_u, 4))
        traj = Trajectory(
            task_id=task.task_id,
            stage=stage,
            mode=mode,
            messages=messages,
            steps=steps,
            termination="max_turns" if hit_limit else "answered",
            final_answer=None if hit_limit else self._answer(stage, seen),
            identified_preferences=self._identified(success) if stage == 1 and not hit_limit else None,
            recommended_ids=self._recommended(success, seen) if stage == 2 and not hit_limit else [],
        )
        verdict = self._verdict(stage, success)
        r_fmt = 1.0 if all(s.format.think_ok for s in steps) and not hit_limit else 0.75
        r_tool = sum(per_call) / len(per_call) if per_call else 0.0
        r_z = (verdict.m1 or 0) / max(1, verdict.F) if stage == 1 else float(success)
        components = {"R_z": round(r_z, 4), "R_tool": round(r_tool, 4), "R_fmt": r_fmt, "stage": float(stage)}
        total = round(r_z + 0.5 * r_tool + 0.2 * r_fmt, 4)
        reward = RewardBreakdown(total=total, components=components, per_tool_call=per_call)
        return StageResult(trajectory=traj, verdict=verdict, reward=reward), seen

    def _step(self, text: str, calls: list[ToolCall], results: list[ToolResult], flags: FormatFlags) -> Step:
        rng = self.rng
        return Step(
            assistant_text=text,
            tool_calls=calls,
            tool_results=results,
            format=flags,
            prompt_tokens=rng.randrange(2000, 30000),
            completion_tokens=rng.randrange(80, 900),
            latency_s=round(rng.uniform(0.3, 4.0), 3),
            finish_reason="stop",
        )

    def _identified(self, success: bool) -> list[Preference]:
        prefs = [p.model_copy() for p in self.task.preferences]
        if not success and prefs:
            prefs[0] = prefs[0].model_copy(update={"value": "unknown"})
        return prefs

    def _recommended(self, success: bool, seen: list[str]) -> list[str]:
        refs = self.task.reference_product_ids
        if success:
            return list(refs)
        return [seen[0] if seen else f"synth:{self.idx:05d}-p000"] + list(refs[1:])

    def _answer(self, stage: int, seen: list[str]) -> str:
        if stage == 1:
            return json.dumps({"preferences": [p.model_dump() for p in self.task.preferences]})
        ids = self.task.reference_product_ids
        return self._plant("Here is my pick: " + ", ".join(f"@REC::{i}@" for i in ids))

    def _verdict(self, stage: int, success: bool) -> Verdict:
        task = self.task
        f = len(task.preferences)
        n = len(task.slots)
        labels = [f"{p.attribute}={p.value}" for p in task.preferences]
        matched = labels if success else labels[1:]
        reasons = [self._plant(f"{lab}: matched" if lab in matched else f"{lab}: not matched") for lab in labels]
        common = dict(judge="rule", stage=stage, F=f, N=n, b=int(task.task_type == "addon"), matched=matched)
        if stage == 1:
            return Verdict(
                **common,
                q1=1,
                m1=float(len(matched)),
                c1=float(n) if n > 1 else None,
                h1=0 if success else self.rng.randrange(0, 2),
                success=success,
                reasons=reasons,
            )
        return Verdict(
            **common,
            p2=1,
            q2=1 if success or self.rng.random() < 0.5 else 0,
            m2=float(len(matched)),
            n2=float(n if success else n - 1),
            u2=(1 if success else self.rng.randrange(0, 2)) if n > 1 else None,
            success=success,
            reasons=reasons,
        )


def _episode(
    task: Task, *, seed: int, trial: int, strategy: str, policy: str, turns: int, result_chars: int, payload: str | None
) -> EpisodeResult:
    mode, _, hint = strategy.partition(":")
    hint = hint or "none"
    rng = random.Random(f"{seed}|{task.task_id}|{trial}|{strategy}")
    ep_seed = rng.randrange(2**31)
    errored = rng.random() < 0.02
    if errored and payload is None:
        return EpisodeResult(
            task_id=task.task_id,
            task_type=task.task_type,
            mode=mode,
            hint=hint,
            policy=policy,
            trial=trial,
            seed=ep_seed,
            stages=[],
            acc=0.0,
            succ=False,
            wall_s=round(rng.uniform(1, 20), 3),
            error="ServiceError: backend http://127.0.0.1:8000/v1 failed after 3 retries (HTTP 503)",
        )
    build = _Episode(task, rng, turns=turns, result_chars=result_chars, payload=payload)
    found = rng.random() < 0.7
    succ = found and rng.random() < 0.85
    s1, _ = build.stage(1, found, mode=mode)
    s2, _ = build.stage(2, succ, mode=mode)
    feedback = [] if hint == "none" else [build._plant(f"Remember I prefer {task.preferences[0].value}.")]
    simulator = {
        "name": "scripted",
        "model": None,
        "seed": ep_seed,
        "hint": hint,
        "consulted": hint != "none",
        "feedback": feedback,
    }
    return EpisodeResult(
        task_id=task.task_id,
        task_type=task.task_type,
        mode=mode,
        hint=hint,
        policy=policy,
        trial=trial,
        seed=ep_seed,
        stages=[s1, s2],
        acc=round((s1.verdict.m1 or 0) / max(1, s1.verdict.F), 4),
        succ=succ,
        wall_s=round(rng.uniform(5, 120), 3),
        simulator=simulator,
    )


def write_synthetic_run(
    run_dir: str | Path,
    n_episodes: int,
    *,
    seed: int = 0,
    turns: int = 10,
    result_chars: int = 1500,
    trials: int = 1,
    strategies: tuple[str, ...] = ("two_stage:none",),
    policy: str = "synthetic-policy",
    bench_dir: str | Path | None = None,
    bench_seed: int = 0,
    payload: str | None = None,
) -> SyntheticRun:
    """Write a synthetic eval run of ``n_episodes`` lines (module docstring) and its benchmark.

    ``turns``: assistant turns per stage (>= 2; failed stages may stop at the limit, others end
    0..turns/3 turns earlier); ``result_chars``: approximate characters of each tool result's JSON
    (>= 200); ``trials`` × ``strategies`` (``two_stage:none|low|high``) × tasks cover the episodes, with
    ``ceil(n_episodes / (trials × len(strategies)))`` tasks; ``bench_dir``: where the benchmark goes
    (default ``<run_dir>/bench``). The tasks depend on ``bench_seed`` only (not on ``seed``, which
    drives the episodes), so several runs written into one ``bench_dir`` share one benchmark: a
    benchmark this module wrote there with the same ``bench_seed`` is kept, or grown when this run
    needs more tasks. ``payload``: planted in the first episode (and the first task's instruction).
    The run's files are replaced. Raises ValueError naming the argument for out-of-range values."""
    if n_episodes < 1:
        raise ValueError(f"n_episodes must be >= 1 (got {n_episodes})")
    if turns < 2:
        raise ValueError(f"turns must be >= 2 (got {turns})")
    if result_chars < 200:
        raise ValueError(f"result_chars must be >= 200 (got {result_chars})")
    if trials < 1 or not strategies:
        raise ValueError(f"trials must be >= 1 and strategies non-empty (got {trials}, {strategies!r})")
    for s in strategies:
        mode, _, hint = s.partition(":")
        if mode != "two_stage" or (hint or "none") not in ("none", "low", "high"):
            raise ValueError(f"strategies: {s!r} is not one of two_stage:none, two_stage:low, two_stage:high")
    run = Path(run_dir)
    bench = Path(bench_dir) if bench_dir is not None else run / "bench"
    n_tasks = math.ceil(n_episodes / (trials * len(strategies)))
    kept = _existing_bench(bench, bench_seed, payload)
    tasks, sessions = synthetic_tasks(max(n_tasks, kept), seed=bench_seed, payload=payload)
    if kept < n_tasks:
        _write_bench(bench, tasks, sessions, bench_seed, payload)
    run.mkdir(parents=True, exist_ok=True)
    results = run / "results.jsonl"
    with open(results, "w", encoding="utf-8") as fh:
        for i in range(n_episodes):
            strategy = strategies[i // (n_tasks * trials)]
            trial = (i // n_tasks) % trials
            ep = _episode(
                tasks[i % n_tasks],
                seed=seed,
                trial=trial,
                strategy=strategy,
                policy=policy,
                turns=turns,
                result_chars=result_chars,
                payload=payload if i == 0 else None,
            )
            fh.write(ep.model_dump_json() + "\n")
    config = EvalConfig(
        bench=BenchmarkSelection(path=bench.resolve()),
        output=OutputConfig(name=run.name, runs_dir=run.resolve().parent),
        strategies=list(strategies),
        trials=trials,
        seed=seed,
    )
    config.backend.model = policy
    dump_yaml(config, run / "config.yaml", header="synthetic run written by benchmarks/viewer_synth.py")
    return SyntheticRun(
        run_dir=run,
        bench_dir=bench,
        results=results,
        n_episodes=n_episodes,
        task_ids=[t.task_id for t in tasks[:n_tasks]],
        bytes=results.stat().st_size,
    )


def write_large_episode(
    run_dir: str | Path,
    *,
    seed: int = 0,
    turns: int = 200,
    result_chars: int = 8000,
    bench_dir: str | Path | None = None,
    payload: str | None = None,
) -> SyntheticRun:
    """A run of ONE episode with ``turns`` assistant turns per stage and ``result_chars``-sized tool
    results (the defaults give about 6 MB on one line): the episode page's worst case. Arguments as
    :func:`write_synthetic_run`."""
    return write_synthetic_run(
        run_dir,
        1,
        seed=seed,
        turns=turns,
        result_chars=result_chars,
        bench_dir=bench_dir,
        payload=payload,
        policy="synthetic-large",
    )
