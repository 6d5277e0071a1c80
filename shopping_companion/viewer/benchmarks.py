"""Which benchmark and checkpoint a run used: read from the run's ``config.yaml`` and
``summary.json`` (side files read by :func:`~shopping_companion.viewer.files.read_side` rules), and
the benchmark's tasks loaded once."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from shopping_companion.types import Task
from shopping_companion.viewer.files import RunUnreadableError, display_path, open_regular, read_side

__all__ = ["TASKS_FILE_CAP", "run_config", "policy_step", "declared_checkpoint", "find_benchmark", "load_tasks"]

#: Largest size in bytes of a benchmark's ``tasks.jsonl``; a larger one counts as no benchmark.
TASKS_FILE_CAP = 512 << 20


def run_config(run_dir: Path, root: Path | None = None) -> dict | None:
    """The run's ``config.yaml`` as a mapping, read only when it is a regular file of at most
    :data:`~shopping_companion.viewer.files.SIDE_FILE_CAP` bytes resolving inside ``root`` (None: anywhere); None
    when it is absent, cannot be read or parsed, or is not a mapping."""
    from shopping_companion.config import parse_yaml

    cfg = run_dir / "config.yaml"
    raw = read_side(cfg, root)
    if raw is None:
        return None
    try:
        data = parse_yaml(raw.decode("utf-8"), f"config file {str(cfg)!r}")
    except Exception:  # noqa: BLE001 - a config the viewer cannot parse names nothing
        return None
    return data if isinstance(data, dict) else None


_STEP_IN_NAME = re.compile(r"(?:^|[/:+])(?:checkpoint-|global_step_)(\d+)(?=$|[/+])")


def policy_step(policy: str | None) -> int | None:
    """The training step a policy name carries (``local:outcome_only/checkpoint-60`` -> 60,
    ``local:exp/global_step_40`` -> 40; with a ``+lora:`` adapter of its own step, the adapter's);
    None when it names none."""
    found = _STEP_IN_NAME.findall(policy or "")
    return int(found[-1]) if found else None


def declared_checkpoint(config: dict | None) -> tuple[str | None, int | None]:
    """``(label, step)`` of the local checkpoint a run's config evaluates (``backend.kind: local``,
    ``backend.model_path`` and ``backend.adapter``) as
    :func:`~shopping_companion.llm.local_transformers.default_policy_name` names it, without the
    ``local:`` prefix; ``(None, None)`` for another backend or no config."""
    from shopping_companion.llm.local_transformers import checkpoint_label, checkpoint_step

    backend = (config or {}).get("backend")
    if not isinstance(backend, dict) or backend.get("kind") != "local":
        return None, None
    model, adapter = backend.get("model_path"), backend.get("adapter")
    if not isinstance(model, str) or not model:
        return None, None
    label = checkpoint_label(model)
    step = checkpoint_step(model)
    if isinstance(adapter, str) and adapter:
        label += f"+lora:{checkpoint_label(adapter)}"
        step = checkpoint_step(adapter) if checkpoint_step(adapter) is not None else step
    return label, step


def _declared_benchmarks(run_dir: Path, root: Path | None = None, config: dict | None = None) -> list[str]:
    """Benchmark paths named by the run: ``config.yaml`` ``bench.path`` (also ``benchmark.path``;
    ``config``: that file as :func:`run_config` read it, read here when None), then
    ``summary.json`` ``meta.benchmark``. Both are read only when they are regular files of at most
    :data:`~shopping_companion.viewer.files.SIDE_FILE_CAP` bytes resolving inside ``root`` (None: anywhere)."""
    out: list[str] = []
    data = config if config is not None else run_config(run_dir, root)
    if isinstance(data, dict):
        for key in ("bench", "benchmark"):
            sec = data.get(key)
            if isinstance(sec, dict) and isinstance(sec.get("path"), str):
                out.append(sec["path"])
    raw = read_side(run_dir / "summary.json", root)
    if raw is not None:
        try:
            meta = json.loads(raw).get("meta") or {}
            if isinstance(meta.get("benchmark"), str):
                out.append(meta["benchmark"])
        except (ValueError, AttributeError, RecursionError):
            pass
    return list(dict.fromkeys(out))


def _tasks_file_ok(p: Path) -> bool:
    """``p`` is a regular file of at most :data:`TASKS_FILE_CAP` bytes (symlinks followed)."""
    try:
        st = os.stat(p)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size <= TASKS_FILE_CAP


def find_benchmark(
    run_dir: Path, root: Path | None = None, config: dict | None = None
) -> tuple[Path | None, str | None]:
    """``(benchmark directory holding tasks.jsonl or None, the path the run names or None)``.

    A relative declared path is tried against the current directory, then the run directory and
    each of its parents (a run started elsewhere); last, ``<run dir>/bench`` (the quickstart's).
    ``root``: the directory the run's side files must resolve inside (:func:`_declared_benchmarks`);
    the benchmark itself may be anywhere, but its ``tasks.jsonl`` must be a regular file of at most
    :data:`TASKS_FILE_CAP` bytes."""
    declared = _declared_benchmarks(run_dir, root, config)
    cands: list[Path] = []
    for s in declared:
        p = Path(s).expanduser()
        if p.is_absolute():
            cands.append(p)
        else:
            cands += [Path.cwd() / p, run_dir / p, *(q / p for q in list(run_dir.resolve().parents)[:8])]
    cands.append(run_dir / "bench")
    for c in cands:
        if _tasks_file_ok(c / "tasks.jsonl"):
            return c, declared[0] if declared else display_path(c)
    return None, declared[0] if declared else None


def load_tasks(bench_dir: Path) -> tuple[dict[str, Task], str | None]:
    """``(task_id -> Task, SHA-256 hex digest of the file)`` from ``<bench_dir>/tasks.jsonl``, read
    once (lines that are not tasks are skipped); ``({}, None)`` when it is not a regular file of at
    most :data:`TASKS_FILE_CAP` bytes or cannot be read. The digest tells whether two runs share a
    benchmark (:func:`~shopping_companion.viewer.compare.compare`)."""
    import hashlib

    out: dict[str, Task] = {}
    h = hashlib.sha256()
    try:
        with open_regular(bench_dir / "tasks.jsonl", None, TASKS_FILE_CAP) as f:
            for raw in f:
                h.update(raw)
                if raw.strip():
                    try:
                        t = Task.model_validate_json(raw)
                    except (ValueError, RecursionError):
                        continue
                    out[t.task_id] = t
    except (OSError, RunUnreadableError):
        return {}, None
    return out, h.hexdigest()
