"""Measure SFT decontamination false alarms on a real benchmark with a strong scripted teacher.

Collects SFT data on the train split of ``--bench`` (default: the quickstart's benchmark) with the
gold-knowing scripted policy (:class:`~shopping_companion.envs.scripted.GoldPolicy`, one per task,
found from the ``Shopping request:`` line of the opening message; it is a test teacher that knows
the answers, never a baseline) through :func:`shopping_companion.sft.collect.collect` (the real
environment, memory, product index and rule judge of ``shopcomp sft collect``), splits the kept
stages into step-level examples and checks them against the test split twice:

- ``whole_turn``: the earlier rule (a test text is owned by train only when it equals a whole
  train text; needle turns are not matched per sentence);
- ``contained``: the current rule (a test text inside a train-owned text is not a finding; needle
  turns are matched per turn and per sentence).

Prints violations of each rule by kind with examples, then runs the export (``drop_flagged`` when
the current rule still finds something) and prints its length report. Outputs go to ``--out``
(default /tmp/sft_work/decontam), never into the repository.

    python benchmarks/bench_sft_decontam.py [--bench runs/quickstart/bench] [--trials 1] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shopping_companion.benchmark.kit import build_kit  # noqa: E402
from shopping_companion.benchmark.synth import load_benchmark  # noqa: E402
from shopping_companion.envs.scripted import GoldPolicy  # noqa: E402
from shopping_companion.llm.base import AssistantMessage  # noqa: E402
from shopping_companion.sft.collect import collect, read_kept  # noqa: E402
from shopping_companion.sft.config import CollectConfig  # noqa: E402
from shopping_companion.sft.decontam import find_contamination  # noqa: E402
from shopping_companion.sft.examples import step_examples  # noqa: E402
from shopping_companion.sft.export import export_dataset  # noqa: E402


class GoldTeacher:
    """A ChatBackend that plays :class:`GoldPolicy` of the task named in the opening message."""

    name = "gold-teacher (scripted GoldPolicy per task; knows the answers; measurement only)"

    def __init__(self, tasks: list[Any]) -> None:
        self.by_request = {f"Shopping request: {t.instruction}": GoldPolicy(t) for t in tasks}

    def chat(self, messages: Any, tools: Any = None, sampling: Any = None) -> AssistantMessage:
        opening = next(str(m.get("content") or "") for m in messages if m.get("role") == "user")
        for key, policy in self.by_request.items():
            if key in opening:
                return policy.chat(messages, tools, sampling)
        raise LookupError("no task's instruction in the opening message")


def _show(name: str, violations: list[Any], n: int = 4) -> None:
    kinds = Counter(v.kind for v in violations)
    trajs = {v.example_id.rsplit("/turn", 1)[0] for v in violations}
    print(f"{name}: {len(violations)} violations {dict(kinds)} in {len(trajs)} trajectories", flush=True)
    for v in violations[:n]:
        print(f"   {v.example_id}: {v.kind} of {v.test_task_id} ({v.detail})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", type=Path, default=Path("runs/quickstart/bench"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/sft_work/decontam"))
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--index-dir", type=Path, default=None)
    ap.add_argument("--cutoff-len", type=int, default=4096)
    a = ap.parse_args()

    bench = a.bench.resolve()
    collect_dir = a.out / "collect"
    data: dict[str, Any] = {"index_dir": str(a.index_dir)} if a.index_dir else {}
    cfg = CollectConfig(bench={"path": bench}, out=collect_dir, trials=a.trials, concurrency=a.concurrency, data=data)
    t0 = time.perf_counter()
    kit = build_kit(cfg, collect_dir)
    tasks = kit.resources.tasks
    teacher = GoldTeacher(tasks)
    summary = collect(
        tasks,
        teacher,
        kit.resources.search,
        kit.memory(),
        kit.judge,
        collect_dir,
        kit.settings,
        policy=cfg.keep,
        concurrency=cfg.concurrency,
        strategies=",".join(cfg.strategies),
        identity={"teacher": teacher.name, "judge": kit.judge_desc, "bench": str(bench)},
        progress=False,
    )
    print(
        f"collect: {summary.episodes} episodes, Succ {summary.succ_rate:.3f}, kept {summary.kept} stages "
        f"{summary.kept_by_stage} ({time.perf_counter() - t0:.1f}s)",
        flush=True,
    )
    b = load_benchmark(bench)
    tests = [t for t in b.tasks if t.split == "test"]
    train = [t for t in b.tasks if t.split == "train"]
    examples = step_examples(read_kept(collect_dir))
    print(f"{len(examples)} step-level examples; {len(tests)} test / {len(train)} train tasks")
    results = {}
    for rule in ("whole_turn", "contained"):
        t1 = time.perf_counter()
        v, exp, shared = find_contamination(examples, tests, b.sessions, train_tasks=train, train_match=rule)
        results[rule] = v
        _show(f"rule {rule} ({time.perf_counter() - t1:.2f}s, shared_with_train {shared}, exposures {len(exp)})", v)
    s = export_dataset(
        examples,
        a.out / "export",
        test_tasks=tests,
        train_tasks=train,
        sessions=b.sessions,
        overrides={"cutoff_len": a.cutoff_len},
        drop_flagged=bool(results["contained"]),
        allow_truncation=True,
    )
    lg = s.lengths
    print(
        f"export: {s.examples} examples written, {len(s.dropped)} trajectories dropped; lengths ({lg['method']}, "
        f"{lg['tokenizer']}): min {lg['min']} median {lg['median']} p90 {lg['p90']} p99 {lg['p99']} max {lg['max']}; "
        f"{lg['over_cutoff']} exceed cutoff_len {lg['cutoff_len']} {('[' + lg['note'] + ']') if lg['note'] else ''}"
    )
    print(json.dumps({k: len(v) for k, v in results.items()}))


if __name__ == "__main__":
    main()
