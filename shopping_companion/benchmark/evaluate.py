"""The evaluation runner: episodes through :class:`ShoppingCompanionEnv`, results appended to JSONL.

``results.jsonl`` gets one :class:`~shopping_companion.types.EpisodeResult` per line, written and
flushed as each episode finishes. Rerunning with the same output directory resumes: finished
(task_id, trial) pairs are skipped, and a torn last line from an interrupted run is cut off before
appending, so nothing is lost or duplicated.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from shopping_companion.benchmark.report import read_results
from shopping_companion.envs.env import EnvConfig, Judge, ShoppingCompanionEnv
from shopping_companion.envs.tools import MemoryBackend, ProductBackend, ToolBox
from shopping_companion.llm.base import BackendError, ChatBackend, Sampling
from shopping_companion.types import EpisodeResult, Task


@dataclass
class EvalSettings:
    """Runner settings: ``trials`` episodes per task, sampling for the backend, env config."""

    trials: int = 1
    sampling: Sampling | None = None
    env: EnvConfig | None = None
    seed: int = 0


def run_episode(
    task: Task,
    backend: ChatBackend,
    products: ProductBackend,
    memory: MemoryBackend,
    judge: Judge,
    settings: EvalSettings,
    trial: int = 0,
) -> EpisodeResult:
    """Run one full episode; a backend failure ends it with ``error`` set (never scored as 0)."""
    env_cfg = settings.env or EnvConfig()
    env = ShoppingCompanionEnv(task, ToolBox(products, memory, env_cfg.max_observation_chars), judge, env_cfg)
    env.reset(seed=settings.seed + trial)
    sampling = settings.sampling
    if sampling is not None and sampling.seed is not None:
        sampling = sampling.model_copy(update={"seed": sampling.seed + trial})
    while not env.done:
        try:
            msg = backend.chat(env.messages, env.tool_schemas, sampling)
        except BackendError as e:
            env.abort("backend_error", str(e))
            break
        env.step(msg)
    return env.episode_result(policy=backend.name, trial=trial, seed=settings.seed + trial)


def _repair_tail(path: Path) -> None:
    """Cut a torn (unterminated) last line left by an interrupted write."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return
        data = path.read_bytes()
        cut = data.rfind(b"\n") + 1
        f.truncate(cut)


class RunLockedError(RuntimeError):
    """Another process is writing the same results file."""


@contextmanager
def _exclusive(path: Path):
    """Hold an exclusive lock on ``<results>.lock`` so two runs never append to one file."""
    lock_path = path.with_name(path.name + ".lock")
    with open(lock_path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLockedError(
                f"{path} is being written by another running evaluation (lock {lock_path}); "
                "wait for it to finish or use another --name"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def done_keys(path: Path) -> set[tuple[str, int]]:
    return {(r.task_id, r.trial) for r in read_results(path)}


def run_evaluation(
    tasks: Iterable[Task],
    backend: ChatBackend,
    products: ProductBackend,
    make_memory: Callable[[Task], MemoryBackend],
    judge: Judge,
    results_path: str | Path,
    settings: EvalSettings | None = None,
    progress: bool = True,
) -> list[EpisodeResult]:
    """Evaluate ``backend`` on ``tasks``, appending to ``results_path``; returns ALL results in
    the file (earlier runs included) in file order."""
    settings = settings or EvalSettings()
    path = Path(results_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(path):
        _run_locked(tasks, backend, products, make_memory, judge, path, settings, progress)
    return read_results(path)


def _run_locked(tasks, backend, products, make_memory, judge, path: Path, settings: EvalSettings, progress: bool) -> None:
    _repair_tail(path)
    done = done_keys(path)
    todo = [(t, k) for t in tasks for k in range(settings.trials) if (t.task_id, k) not in done]
    cols = [TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[status]}")]
    succ = n = 0
    with Progress(*cols, disable=not progress, transient=False) as bar, open(path, "a", encoding="utf-8") as f:
        job = bar.add_task("eval", total=len(todo), status="")
        for task, trial in todo:
            memory = make_memory(task)
            res = run_episode(task, backend, products, memory, judge, settings, trial)
            f.write(res.model_dump_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
            n += 1
            succ += int(res.succ)
            bar.update(job, advance=1, status=f"Succ {succ}/{n}")


def describe(settings: EvalSettings) -> dict[str, Any]:
    return {
        "trials": settings.trials,
        "seed": settings.seed,
        "sampling": settings.sampling.model_dump() if settings.sampling else None,
        "env": (settings.env or EnvConfig()).model_dump(),
    }
