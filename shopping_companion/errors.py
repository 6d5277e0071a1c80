"""The package's exceptions: one tree under :class:`ShopCompError`.

Every error the package raises on purpose is a :class:`ShopCompError`. The command line catches
that base once (``shopping_companion.cli.common.ShopCompGroup``), prints the message as plain text and exits with
the class's :attr:`~ShopCompError.exit_code`:

====  ==========================================  =============================================
code  classes                                     meaning for the user
====  ==========================================  =============================================
0     (none)                                      every requested episode has a result
1     anything that is not a ShopCompError        a bug: the traceback is printed
2     :class:`ConfigError`, :class:`DataError`    fix the command, the config or the data
3     (``shopcomp eval`` only)                    some episodes ended with an error; all written
4     :class:`ServiceError`                       an endpoint is down or unreachable; rerun later
5     :class:`RunError`                           another process holds the run, or its files
                                                  changed under it; nothing was lost
====  ==========================================  =============================================

Most classes also derive from the built-in exception they used to be (``ValueError``,
``RuntimeError``, ``FileNotFoundError``, ``TimeoutError``), so ``except ValueError`` in user code
written against earlier releases keeps working. Messages name the field or file and the allowed
values. Errors that only steer control flow inside one module stay private to it (``_Transient``
and the like); :class:`ToolInputError` never leaves an episode (the environment turns it into an
observation for the agent).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, TypeVar

__all__ = [
    "ShopCompError",
    # configuration
    "ConfigError",
    "UnknownNameError",
    "RunIdentityError",
    # data
    "DataError",
    "DataDirError",
    "CatalogFormatError",
    "BadRecord",
    "ProductIndexError",
    "DownloadError",
    "BenchmarkError",
    "BenchmarkMissingError",
    "SynthError",
    "GenerationError",
    "ContaminationError",
    "LeakageError",
    "QueryRuleError",
    # services
    "ServiceError",
    "BackendError",
    "ContextLengthError",
    "CircuitOpenError",
    "JudgeFailedError",
    "ScoringDeadlineError",
    "UncertainUnscoredError",
    "JSONAskError",
    "CallTimeout",
    "JVMError",
    "JVMForkError",
    # training
    "TrainingError",
    "TrainingSignalError",
    "HandoffError",
    # runs
    "RunError",
    "RunLockedError",
    "RunFileReplacedError",
    # inside an episode
    "ToolInputError",
    "check_at_least",
    "check_tool_text",
    "VerdictMismatchError",
    "EXIT_OK",
    "EXIT_CRASH",
    "EXIT_USAGE",
    "EXIT_EPISODE_ERRORS",
    "EXIT_SERVICE",
    "EXIT_RUN",
]

EXIT_OK = 0
#: An unexpected exception (a bug): not a :class:`ShopCompError`.
EXIT_CRASH = 1
#: Configuration or data the user must fix (:class:`ConfigError`, :class:`DataError`).
EXIT_USAGE = 2
#: ``shopcomp eval``: some requested episodes ended with an error (everything is written).
EXIT_EPISODE_ERRORS = 3
#: An endpoint (policy, judge, simulator, embeddings) is down or unreachable (:class:`ServiceError`).
EXIT_SERVICE = 4
#: The run's files are held by another process or changed under it (:class:`RunError`).
EXIT_RUN = 5


class ShopCompError(Exception):
    """Base of every error the package raises on purpose; :attr:`exit_code` is the CLI's status."""

    exit_code: int = EXIT_USAGE


# --------------------------------------------------------------------------- configuration


class ConfigError(ShopCompError, ValueError):
    """A configuration value is invalid; the message names the field and the allowed values."""


class UnknownNameError(ConfigError):
    """A name is neither registered, nor a ``module:attr`` path, nor an entry point."""


class RunIdentityError(ConfigError):
    """The results file belongs to a run with a different configuration, or its run identity file
    is missing or corrupt while it already holds results."""


# --------------------------------------------------------------------------- data


class DataError(ShopCompError, ValueError):
    """Input data (a directory, a file, a record) is missing, malformed or inconsistent."""


class DataDirError(DataError, FileNotFoundError):
    """No data directory can be found; the message names every place tried and how to pass one."""


class CatalogFormatError(DataError):
    """The catalog file's format cannot be determined, or a mapping is missing or invalid."""


class BadRecord(DataError):
    """A catalog record that cannot become a product; ``reason`` is a load-report reason key,
    ``detail`` a short human-readable explanation (the loader counts it and goes on)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class ProductIndexError(DataError, RuntimeError):
    """An on-disk index is missing, corrupted, stale or foreign; the message says how to rebuild."""


class DownloadError(DataError, RuntimeError):
    """A download failed (offline, HTTP error, checksum mismatch); the message says what to do."""


class BenchmarkError(DataError):
    """A benchmark directory is inconsistent: a file does not match the manifest's SHA-256, task ids
    repeat, tasks reference sessions the sessions file lacks, or gold products are not in the
    catalog. The message names the file or ids."""


class BenchmarkMissingError(BenchmarkError, FileNotFoundError):
    """A benchmark directory, or its manifest / tasks / sessions file, does not exist (an
    incomplete build, or a wrong path); the message says how to make one."""


class SynthError(DataError):
    """The inputs cannot produce the requested benchmark; the message says why and what to change."""


class GenerationError(ShopCompError, RuntimeError):
    """A generator could not produce valid output for one task attempt (e.g. an LLM kept returning
    invalid JSON after its retries). The attempt is counted and the task is re-drawn or dropped."""


class ContaminationError(DataError):
    """Test-split data was found in SFT examples; ``findings`` lists every violation (objects with
    ``kind``, ``test_task_id``, ``example_id`` and ``detail``, see ``shopping_companion.sft.decontam``)."""

    def __init__(self, findings: list[Any]) -> None:
        self.findings = findings
        kinds = Counter(f.kind for f in findings)
        tasks = sorted({f.test_task_id for f in findings})
        first = "; ".join(f"{f.example_id}: {f.kind} of {f.test_task_id} ({f.detail})" for f in findings[:3])
        super().__init__(
            f"decontamination failed: {len(findings)} finding(s) ({dict(kinds)}) from {len(tasks)} test task(s) "
            f"{tasks[:5]}; e.g. {first}. Remove those trajectories (or the test tasks' overlap) and export again."
        )


class LeakageError(ShopCompError, AssertionError):
    """Hidden target-review text reached something the assistant sees (a broken invariant)."""


class QueryRuleError(DataError):
    """A question breaks a trajectory rule; the message names the question and the rule."""


# --------------------------------------------------------------------------- services


class ServiceError(ShopCompError, RuntimeError):
    """A service the run depends on (policy endpoint, judge, embeddings, the JVM) failed."""

    exit_code = EXIT_SERVICE


class BackendError(ServiceError):
    """The backend could not produce a message after its retries (recorded, never scored)."""


class ToolServiceError(BackendError):
    """The tools / judge / reward service (``shopcomp serve``) could not answer after the client's
    retries and deadline (connection refused, timeouts, 5xx). Inside an episode it ends the
    episode as a backend error (recorded, never scored, run again on resume), never as an
    observation the agent is blamed for."""


class ContextLengthError(BackendError):
    """The server refused the request because the prompt exceeds the model's context window
    (e.g. HTTP 400 "maximum context length"). Not retried. For a policy this is a model failure:
    the stage ends with termination ``context_length`` and is scored with what it did so far."""


class CircuitOpenError(ServiceError):
    """Too many consecutive connection failures or timeouts across a run: the endpoint is
    considered down and the run stops (the CLI exits :data:`EXIT_SERVICE`). Deliberately *not* a
    :class:`BackendError`, so episode code that records backend errors does not swallow it."""


class JudgeFailedError(ServiceError, ValueError):
    """A judge failed, so the trajectory cannot be scored (it is recorded as unscored, never 0)."""


class ScoringDeadlineError(JudgeFailedError):
    """Judging and rewarding one sample took longer than its deadline; the sample is not scored."""


class UncertainUnscoredError(JudgeFailedError):
    """The reward spec says ``uncertain: unscored`` and the verdict has uncertain items no judge
    decided: the stage is not scored (no reward, no gradient), like a judge failure."""


class JSONAskError(ServiceError):
    """No valid JSON reply after the retries; ``errors`` lists what went wrong per attempt."""

    def __init__(self, message: str, errors: list[str]) -> None:
        self.errors = errors
        super().__init__(message + ": " + " | ".join(errors)[:2000])


class CallTimeout(ServiceError, TimeoutError):
    """A bounded call did not finish within its seconds (it goes on in a daemon thread; its
    result is dropped)."""


class JVMError(ServiceError):
    """The JVM cannot be (or was not) started the way the catalog search needs."""


class JVMForkError(JVMError):
    """Java was used in a process forked from one whose JVM was running (it would hang forever)."""


# --------------------------------------------------------------------------- training


class TrainingError(ShopCompError, RuntimeError):
    """A training run finished but must not be trusted (exit status 3, like a run whose episodes
    errored: everything is written, something in it is wrong)."""

    exit_code = EXIT_EPISODE_ERRORS


class TrainingSignalError(TrainingError):
    """GRPO had no learning signal: most groups got the same reward for every completion."""


class HandoffError(TrainingError):
    """A phase did not start from the weights the one before it wrote (e.g. GRPO sampling from the
    base model instead of the SFT model, an evaluation of another checkpoint than it names)."""


# --------------------------------------------------------------------------- runs


class RunError(ShopCompError, RuntimeError):
    """The run's files are held by another process or changed while the run wrote them."""

    exit_code = EXIT_RUN


class RunLockedError(RunError):
    """Another process is writing the same results file."""


class RunFileReplacedError(RunLockedError):
    """The results file was deleted or replaced while this run held it open: what the run writes
    would go to a file nobody can read (and a second writer may own the path now)."""


# --------------------------------------------------------------------------- inside an episode


class ToolInputError(ShopCompError, ValueError):
    """A tool was called with bad arguments.

    The message names the offending field and the allowed values; the environment turns it into
    an error observation for the agent (the episode goes on).
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class VerdictMismatchError(ShopCompError, ValueError):
    """A verdict given to a rubric does not belong to the trajectory or task it is scored with
    (another ``stage``, or a ``b`` flag of the other task type); ``field`` names it
    (``verdict.stage`` / ``verdict.b``). A caller's mistake, never the agent's."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


def check_tool_text(field: str, value: str, item: int | None = None) -> str:
    """``value`` when it is valid Unicode text; raises :class:`ToolInputError` naming ``field``
    (and list ``item``) when it holds a lone surrogate (``\\ud800``...; JSON escapes can carry
    one, but no search index, encoder or UTF-8 writer takes it)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        where = f"item {item} " if item is not None else ""
        raise ToolInputError(
            field,
            f"{where}holds an unpaired surrogate code point (U+{ord(value[e.start]):04X} at character "
            f"{e.start}), which is not text; send valid Unicode",
        ) from None
    return value


_Number = TypeVar("_Number", int, float)


def check_at_least(field: str, value: _Number, low: float, error: type[Exception] = ValueError) -> _Number:
    """``value``; raises ``error("<field>: must be >= <low>, got <value>")`` when ``value < low``:
    the one wording of a numeric parameter's lower bound (``error``: e.g. :class:`ConfigError` for
    a config value)."""
    if value < low:
        raise error(f"{field}: must be >= {low}, got {value}")
    return value
