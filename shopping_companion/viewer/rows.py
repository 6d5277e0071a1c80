"""Rows from parsed run lines: one :class:`~shopping_companion.viewer.models.EpisodeRow` per line
of an evaluation or SFT collection (``EpisodeResult``), an SFT ``kept.jsonl`` (``KeptStage``) or a
GRPO validation dump, from structural checks only (pydantic parses a line only when its episode
is opened). A builder never raises: a line that is not a record of its kind is ``foreign``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any, Iterable, Sequence

from shopping_companion.benchmark import metrics as M
from shopping_companion.types import EpisodeResult, Task
from shopping_companion.viewer.models import MAX_LIMIT, ROW_STATUSES, SORT_FIELDS, EpisodeRow, RunKind
from shopping_companion.viewer.values import article, finite, mean_or_none, short_error
from shopping_companion.viewer.verl_dumps import GRPO_TEXT_KEYS, dump_instruction, grpo_task_id, split_dump_output

__all__ = [
    "ROW_BUILDERS",
    "stand_in",
    "task_category",
    "annotate_task",
    "run_metrics",
    "check_query",
    "select_rows",
    "row_facets",
]

_EPISODE_FIELDS = frozenset(EpisodeResult.model_fields)
_EPISODE_REQUIRED = frozenset(k for k, f in EpisodeResult.model_fields.items() if f.is_required())
_KEPT_REQUIRED = frozenset(
    ("task_id", "trial", "mode", "hint", "stage", "policy", "reason", "acc", "succ", "trajectory", "verdict")
)
#: keys of a validation-dump line that are not reward components (``reward``: verl's copy of ``score``)


def _first_user_text(stages: Any) -> str | None:
    try:
        for m in stages[0]["trajectory"]["messages"]:
            if m.get("role") == "user" and isinstance(m.get("content"), str):
                return m["content"][:2000]
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return None


def _termination(terms: list[str]) -> str | None:
    return next((t for t in terms if t != "answered"), terms[-1] if terms else None)


def _structure_problem(d: Any, required: frozenset[str], allowed: frozenset[str] | None, what: str) -> str | None:
    a = article(what)
    if not isinstance(d, dict):
        return f"not {a} {what}: a JSON {type(d).__name__}, not an object"
    missing = sorted(required - d.keys())
    if missing:
        return f"not {a} {what}: missing field(s) {', '.join(missing[:5])}"
    if allowed is not None:
        extra = sorted(d.keys() - allowed)
        if extra:
            return f"not {a} {what}: unknown field(s) {', '.join(extra[:5])}"
    return None


def _outcome(comps: dict[str, float], stage: int) -> float | None:
    """The paper's outcome reward R1 (``stage`` 1) or R2 (2) from a row's ``s<stage>.<name>``
    components: the component ``R1`` / ``R2`` the outcome reward logs (``R1`` of stage 1, or of the
    single stage 2 of a one-stage episode, where it scores the answer's preferences), else that
    stage's ``R_z``; None when the run's rubric logs neither."""
    name = f"R{stage}"
    for key in (f"s{stage}.{name}", *(f"s{n}.{name}" for n in (1, 2) if n != stage), f"s{stage}.R_z"):
        if key in comps:
            return comps[key]
    return None


def _episode_row(line: int, d: Any) -> EpisodeRow:
    """A row from a parsed ``EpisodeResult`` line (structural checks only; never raises: a number
    out of range, such as an infinite stage or an integer too large for a float, makes it foreign)."""
    problem = _structure_problem(d, _EPISODE_REQUIRED, _EPISODE_FIELDS, "EpisodeResult")
    if problem is None:
        try:
            return _episode_row_unchecked(line, d)
        except (TypeError, KeyError, AttributeError, ValueError, IndexError, OverflowError) as e:
            problem = f"not an EpisodeResult: {short_error(e, 160)}"
    return EpisodeRow(line=line, status="foreign", problem=problem)


def _episode_row_unchecked(line: int, d: dict) -> EpisodeRow:
    stages = d["stages"]
    if not isinstance(stages, list) or not all(isinstance(s, dict) for s in stages):
        raise TypeError("stages must be a list of objects")
    for k in ("task_id", "mode", "policy", "task_type"):
        if not isinstance(d[k], str):
            raise TypeError(f"{k} must be a string")
    if not isinstance(d["succ"], bool) or finite(d["acc"]) is None:
        raise TypeError("acc must be a finite number and succ a boolean")
    error = d.get("error")
    mode, hint = d["mode"], d.get("hint") or "none"
    trial = d.get("trial", 0)
    if not isinstance(trial, int) or isinstance(trial, bool):
        raise TypeError("trial must be an integer")
    judge_failed = any(bool(s["verdict"].get("failed")) for s in stages)
    scored = error is None and not judge_failed
    turns = tools = 0
    terms: list[str] = []
    comps: dict[str, float] = {}
    totals: dict[int, float] = {}
    tool_vals: list[float] = []
    fmt_vals: list[float] = []
    for s in stages:
        traj = s["trajectory"]
        steps = traj.get("steps") or []
        turns += len(steps)
        tools += sum(len(st.get("tool_results") or []) for st in steps)
        terms.append(str(traj.get("termination", "running")))
        stage_no = int(traj.get("stage", 0))
        rew = s.get("reward") or {}
        tot = finite(rew.get("total"))
        if tot is not None:
            totals[stage_no] = tot
            comps[f"s{stage_no}.total"] = tot
        for k, v in (rew.get("components") or {}).items():
            x = finite(v)
            if x is None or k == "stage":
                continue
            comps[f"s{stage_no}.{k}"] = x
            if k == "R_tool":
                tool_vals.append(x)
            elif k == "R_fmt":
                fmt_vals.append(x)
    return EpisodeRow(
        line=line,
        status="ok" if error is None else "error",
        problem=None if error is None else str(error)[:500],
        task_id=d["task_id"],
        task_type=d["task_type"],
        strategy=M.strategy_name(mode, hint),
        trial=trial,
        success=bool(d["succ"]) if scored else None,
        acc=float(d["acc"]) if scored and mode != "oracle" else None,
        r1=_outcome(comps, 1) if scored else None,
        r2=_outcome(comps, 2) if scored else None,
        stage1_total=totals.get(1) if scored else None,
        stage2_total=totals.get(2) if scored else None,
        r_tool=mean_or_none(tool_vals) if scored else None,
        r_fmt=mean_or_none(fmt_vals) if scored else None,
        turns=turns,
        tool_calls=tools,
        termination=_termination(terms),
        instruction=_first_user_text(stages),
        mode=mode,
        hint=hint,
        policy=d["policy"],
        scored=scored,
        components=comps if scored else {},
    )


def _kept_row(line: int, d: Any) -> EpisodeRow:
    """A row from a parsed ``KeptStage`` line (one stage trajectory and its verdict); never raises
    (a number out of range makes it foreign)."""
    problem = _structure_problem(d, _KEPT_REQUIRED, _KEPT_REQUIRED, "KeptStage")
    if problem is None:
        try:
            traj = d["trajectory"]
            steps = traj.get("steps") or []
            mode, hint = str(d["mode"]), str(d["hint"] or "none")
            stage = int(d["stage"])
            acc = finite(d["acc"])
            if acc is None:
                raise TypeError("acc must be a finite number")
            return EpisodeRow(
                line=line,
                status="ok",
                problem=None,
                task_id=str(d["task_id"]),
                strategy=M.strategy_name(mode, hint),
                trial=int(d["trial"]),
                success=bool(d["succ"]),
                acc=acc if mode != "oracle" else None,
                turns=len(steps),
                tool_calls=sum(len(st.get("tool_results") or []) for st in steps),
                termination=str(traj.get("termination", "running")),
                instruction=_first_user_text([d]),
                mode=mode,
                hint=hint,
                stage=stage,
                policy=str(d["policy"]),
                scored=True,
            )
        except (TypeError, KeyError, AttributeError, ValueError, OverflowError) as e:
            problem = f"not a KeptStage: {short_error(e, 160)}"
    return EpisodeRow(line=line, status="foreign", problem=problem)


def _grpo_row(line: int, d: Any) -> EpisodeRow:
    """A row from one line of a verl validation dump (``input``, ``output``, ``score``, extras);
    never raises (numbers that are not finite are left out)."""
    problem = _structure_problem(d, frozenset(("input", "output")), None, "GRPO validation record")
    if problem is None and not (isinstance(d["input"], str) and isinstance(d["output"], str)):
        problem = "not a GRPO validation record: input and output must be strings"
    if problem is None:
        try:
            return _grpo_row_unchecked(line, d)
        except (TypeError, ValueError, OverflowError) as e:
            problem = f"not a GRPO validation record: {short_error(e, 160)}"
    return EpisodeRow(line=line, status="foreign", problem=problem)


def _grpo_row_unchecked(line: int, d: dict) -> EpisodeRow:
    stage = finite(d.get("stage"))
    stage_no = int(stage) if stage in (1.0, 2.0) else None
    comps = {
        (f"s{stage_no}.{k}" if stage_no else k): x
        for k, v in d.items()
        if k not in GRPO_TEXT_KEYS and k != "stage" and (x := finite(v)) is not None
    }
    score = finite(d.get("score"))
    if score is not None:
        comps[f"s{stage_no}.total" if stage_no else "total"] = score
    succ = finite(d.get("success"))
    # assistant turns, as on the episode page (the dump's num_turns counts messages, observations too)
    turns = sum(role == "assistant" for role, _ in split_dump_output(d["output"]))
    return EpisodeRow(
        line=line,
        status="ok",
        problem=None,
        task_id=grpo_task_id(d),
        task_type=d["task_type"] if isinstance(d.get("task_type"), str) else None,
        success=None if succ is None else succ > 0.5,
        r1=_outcome(comps, 1),
        r2=_outcome(comps, 2),
        stage1_total=score if stage_no == 1 else None,
        stage2_total=score if stage_no == 2 else None,
        r_tool=finite(d.get("R_tool")),
        r_fmt=finite(d.get("R_fmt")),
        turns=turns,
        tool_calls=None if finite(d.get("n_tool_calls")) is None else int(finite(d.get("n_tool_calls")) or 0),
        stage=stage_no,
        instruction=dump_instruction(d["input"]),
        scored=not (finite(d.get("judge_failed")) or finite(d.get("deadline_missed"))),
        components=comps,
    )


ROW_BUILDERS = {"eval": _episode_row, "sft_rollouts": _episode_row, "sft_kept": _kept_row, "grpo_val": _grpo_row}


def stand_in(row: EpisodeRow) -> EpisodeResult:
    """A field-light ``EpisodeResult`` (no stages) carrying what the metric functions read."""
    return EpisodeResult.model_construct(
        task_id=row.task_id or "",
        task_type=row.task_type or "single",
        mode=row.mode or "two_stage",
        hint=row.hint or "none",
        policy=row.policy or "",
        trial=row.trial or 0,
        stages=[],
        acc=row.acc if row.acc is not None else 1.0,
        succ=bool(row.success),
        wall_s=0.0,
        error=None,
    )


# --------------------------------------------------------------------------- benchmark lookup


# --------------------------------------------------------------------------- many rows


def run_metrics(
    kind: RunKind, scored: Sequence[EpisodeRow]
) -> tuple[float | None, float | None, dict[int, float], dict[str, float]]:
    """``(acc, succ, pass_hat_k, components)`` of a run's final, scored rows, as
    :class:`~shopping_companion.viewer.models.RunSummary` holds them: for ``EpisodeResult`` runs
    :func:`~shopping_companion.benchmark.metrics.acc_succ` and
    :func:`~shopping_companion.benchmark.metrics.pass_k_table` (k up to the most trials of one
    strategy and task), else plain means; ``components``: the mean of each component."""
    acc = succ = None
    pass_hat: dict[int, float] = {}
    if kind in ("eval", "sft_rollouts"):
        standins = [stand_in(r) for r in scored]
        pooled = M.acc_succ(standins)["all"]
        acc, succ = pooled["acc"], pooled["succ"]
        per = Counter((r.strategy, r.task_id) for r in scored)
        top = max(per.values(), default=0)
        if top:
            table = M.pass_k_table(standins, list(range(1, top + 1)))
            pass_hat = {int(k): v["pass^k"] for k, v in table["k"].items() if v["pass^k"] is not None}
    else:
        acc = mean_or_none(r.acc for r in scored if r.acc is not None)
        succ = mean_or_none(float(r.success) for r in scored if r.success is not None)
    comp: dict[str, list[float]] = {}
    for r in scored:
        for k, v in r.components.items():
            comp.setdefault(k, []).append(v)
    return acc, succ, pass_hat, {k: statistics.fmean(v) for k, v in sorted(comp.items())}


def _wanted(r: EpisodeRow, needle: str | None, keep: dict[str, Any]) -> bool:
    status = keep.get("status")
    if r.status == "superseded" and not keep.get("include_superseded") and status != "superseded":
        return False
    if status is not None and r.status != status:
        return False
    if keep.get("failed_only") and not (r.scored and r.success is False and r.status == "ok"):
        return False
    for name in ("task_type", "strategy", "taxonomy", "stress"):
        if keep.get(name) is not None and getattr(r, name) != keep[name]:
            return False
    if keep.get("ability") is not None and keep["ability"] not in (r.ability or "").split(","):
        return False
    return needle is None or needle in (r.task_id or "").casefold() or needle in (r.instruction or "").casefold()


def select_rows(
    rows: Iterable[EpisodeRow], *, sort: str = "line", desc: bool = False, q: str | None = None, **keep: Any
) -> list[EpisodeRow]:
    """``rows`` filtered and sorted as :meth:`~shopping_companion.viewer.index.RunIndex.query`
    describes (arguments checked there): ``q`` and ``keep`` (``failed_only``, ``task_type``,
    ``taxonomy``, ``strategy``, ``ability``, ``stress``, ``status``, ``include_superseded``) filter, ``sort`` / ``desc``
    order; rows whose ``sort`` value is None come last either way."""
    needle = q.casefold() if q else None
    out = [r for r in rows if _wanted(r, needle, keep)]
    if sort != "line":
        have = [r for r in out if getattr(r, sort) is not None]
        none = [r for r in out if getattr(r, sort) is None]
        have.sort(key=lambda r: (getattr(r, sort), r.line), reverse=desc)
        out = have + none
    elif desc:
        out.reverse()
    return out


def task_category(task: Task) -> str:
    """The task's product categories (each slot's leaf category, else its product type) joined
    with `` + ``."""
    names = [(s.category_path[-1] if s.category_path else s.product_type) for s in task.slots]
    return " + ".join(dict.fromkeys(n for n in names if n)) or ""


def annotate_task(row: EpisodeRow, task: Task | None) -> None:
    """Fill ``row``'s instruction, source, category, abilities and stress variant (and a missing
    task type) from its task (None: left as it is)."""
    if task is None:
        return
    from shopping_companion.benchmark.metrics import task_abilities, task_source, task_stress

    row.ability = ",".join(task_abilities(task))
    row.stress = task_stress(task)[0]
    row.instruction = task.instruction
    row.task_type = row.task_type or task.task_type
    row.source = task_source(task)
    row.category = task_category(task)


def check_query(*, sort: str, offset: int, limit: int, status: str | None) -> None:
    """Raise ``ValueError`` naming the parameter and the allowed values unless ``sort`` is one of
    :data:`~shopping_companion.viewer.models.SORT_FIELDS`, ``offset`` an integer >= 0, ``limit``
    one from 1 to :data:`~shopping_companion.viewer.models.MAX_LIMIT` and ``status`` None or a
    line status."""
    if sort not in SORT_FIELDS:
        raise ValueError(f"sort: must be one of {', '.join(SORT_FIELDS)}; got {sort!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit: must be an integer from 1 to {MAX_LIMIT}; got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset: must be an integer >= 0; got {offset!r}")
    if status is not None and status not in ROW_STATUSES:
        raise ValueError(f"status: must be one of {', '.join(ROW_STATUSES)}; got {status!r}")


def row_facets(rows: Sequence[EpisodeRow]) -> dict[str, list[str]]:
    """Values for the filter menus: ``task_type``, ``strategy``, ``ability``, ``stress``, ``status`` (those present),
    ``taxonomy`` (every category of :data:`~shopping_companion.benchmark.taxonomy.CATEGORY_LABELS`
    plus ``other``, and any other class found)."""
    from shopping_companion.benchmark.taxonomy import CATEGORY_LABELS, OTHER

    tax = list(CATEGORY_LABELS) + [OTHER]
    tax += sorted({r.taxonomy for r in rows if r.taxonomy and r.taxonomy not in tax})
    return {
        "task_type": sorted({r.task_type for r in rows if r.task_type}),
        "taxonomy": tax,
        "strategy": sorted({r.strategy for r in rows if r.strategy}),
        "ability": sorted({a for r in rows if r.ability for a in r.ability.split(",")}),
        "stress": sorted({r.stress for r in rows if r.stress}),
        "status": sorted({r.status for r in rows}),
    }
