"""``shopcomp eval``: parse an :class:`~shopping_companion.benchmark.run_config.EvalConfig` from
``--config``, flags and ``--set``, run it (:func:`shopping_companion.benchmark.run.run_benchmark`),
print the headline numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from shopping_companion.cli.common import DATA_DIR_HELP, INDEX_DIR_HELP, Flag, app, console, flag_command, flag_names
from shopping_companion.errors import EXIT_EPISODE_ERRORS

__all__ = ["EVAL_FLAGS", "LIMITS_HELP", "load_eval_config", "print_summary", "exit_for", "where_episodes_run"]

#: What the endpoint-limit flags bound and their defaults: a paragraph of the help of each command
#: with the backend flags (``eval``, ``sft collect``); their one-line helps point to it.
LIMITS_HELP = (
    "Endpoint limits: --timeout-s bounds one HTTP attempt; --deadline-s one request over all its attempts "
    "(default min(600, (retries+1) x timeout), or $SHOPCOMP_DEADLINE_S); --breaker-threshold consecutive "
    "connection failures / timeouts stop the run (default 5, or $SHOPCOMP_BREAKER_THRESHOLD)."
)

# fmt: off
#: Every ``shopcomp eval`` flag and the config key it overrides (``docs/evaluation.md`` lists the keys).
EVAL_FLAGS: list[Flag] = [
    Flag("--bench DIR", "bench.path", Path, "Benchmark directory written by `shopcomp synth`."),
    Flag("--run-name, --name NAME", "output.name", str, "Run name: results go to RUNS_DIR/NAME/."),
    Flag("--runs-dir DIR", "output.runs_dir", Path, "Parent directory of run outputs (default runs)."),
    Flag("--backend KIND", "backend.kind", str, "Policy: reference | openai | local (default reference)."),
    Flag("--base-url URL", "backend.base_url", str, "OpenAI-compatible endpoint, e.g. http://localhost:8000/v1."),
    Flag("--model NAME", "backend.model", str, "Model name served by the endpoint (--backend openai)."),
    Flag("--api-key-env VAR", "backend.api_key_env", str, "Variable holding the API key (never written anywhere)."),
    Flag("--timeout-s SECONDS", "backend.timeout_s", float, "Wall-clock limit of one HTTP attempt (default 120)."),
    Flag("--max-retries N", "backend.max_retries", int, "Retries after timeouts, 5xx, 429, invalid JSON (default 3)."),
    Flag("--deadline-s SECONDS", "backend.deadline_s", float, "Limit of one request, all attempts (default: above)."),
    Flag("--breaker-threshold N", "backend.breaker_threshold", int, "Consecutive failures to stop (default: above)."),
    Flag("--model-path DIR", "backend.model_path", Path, "Checkpoint directory (--backend local)."),
    Flag("--adapter DIR", "backend.adapter", Path, "LoRA adapter directory (--backend local; needs peft)."),
    Flag("--device DEVICE", "backend.device", str, "cpu | cuda | cuda:N | auto (--backend local)."),
    Flag("--dtype DTYPE", "backend.dtype", str, "auto | float32 | bfloat16 | float16 (--backend local)."),
    Flag("--temperature T", "backend.sampling.temperature", float, "Sampling temperature (default 0.6)."),
    Flag("--top-p P", "backend.sampling.top_p", float, "Nucleus sampling (default 0.95)."),
    Flag("--top-k K", "backend.sampling.top_k", int, "Top-k sampling; 0: not sent (default 20)."),
    Flag("--max-tokens N", "backend.sampling.max_tokens", int, "Max new tokens per assistant turn (default 4096)."),
    Flag("--sampling-seed/--no-sampling-seed", "backend.sampling.send_seed", bool, "Send episode seeds (default on)."),
    Flag("--strategies LIST", "strategies", str, "Comma list: oracle, one_stage, two_stage:none|low|high, or all."),
    Flag("--trials K", "trials", int, "Trials per task and strategy, for pass@k / pass^k (default 1)."),
    Flag("--pass-k LIST", "pass_k", str, "k values of pass@k / pass^k, e.g. 1,2,4 (default 1..trials)."),
    Flag("--concurrency N", "concurrency", int, "Episodes in flight at once, all workers together (default 8)."),
    Flag("--ray ADDRESS", "ray.address", str, "Run episodes on Ray workers: local (a private cluster here) | auto | HOST:PORT | ray://HOST:PORT."),
    Flag("--ray-workers N", "ray.workers", int, "Ray episode workers (default: one per CPU of the cluster; --ray)."),
    Flag("--tools WHERE", "tools", str, "local (default) | serve:URL (a `shopcomp serve` service: tools, judge)."),
    Flag("--seed N", "seed", int, "Base seed: episode seeds derive from (seed, task id, trial) (default 0)."),
    Flag("--split SPLIT", "bench.split", str, "train | test (default: all tasks)."),
    Flag("--limit N", "bench.limit", int, "Evaluate only the first N tasks."),
    Flag("--skip-missing-gold", "bench.skip_missing_gold", bool, "Skip tasks whose gold is missing (default: refuse)."),
    Flag("--max-turns N", "env.max_turns", int, "Max assistant turns per stage (default 20)."),
    Flag("--max-invalid-turns N", "env.max_invalid_turns", int, "Invalid turns in a row that end a stage (default 3)."),
    Flag("--simulator NAME", "simulator", str, "User simulator: scripted (default) | a registered name | module:attr."),
    Flag("--judge KIND", "judge.kind", str, "rule (deterministic, offline; default) | llm (OpenAI-compatible)."),
    Flag("--judge-model NAME", "judge.model", str, "Judge model name (--judge llm)."),
    Flag("--judge-base-url URL", "judge.base_url", str, "Judge endpoint (--judge llm)."),
    Flag("--judge-api-key-env VAR", "judge.api_key_env", str, "Variable holding the judge's API key."),
    Flag("--judge-cascade/--no-judge-cascade", "judge.cascade", bool, "--judge llm: only stages the rule judge is unsure of go to the LLM (default on)."),
    Flag("--reward-config, --rubric SPEC", "rubric", str, "paper (default) | outcome_only | spec/rubric YAML | module:attr (docs/rewards.md)."),
    Flag("--attribution-model NAME", "attribution.model", str, "Also attribute failures with this LLM (App. F.2)."),
    Flag("--attribution-base-url URL", "attribution.base_url", str, "Endpoint of the attribution LLM."),
    Flag("--attribution-api-key-env VAR", "attribution.api_key_env", str, "Variable holding its API key."),
    Flag("--retry-errors/--no-retry-errors", "resume.retry_errors", bool, "Rerun backend / judge errors (default on)."),
    Flag("--retry-failed", "resume.retry_failed", bool, "Also rerun episode errors (tracebacks: results.errors.log)."),
    Flag("--force", "resume.force", bool, "Adopt this config where results.identity.json is missing or corrupt."),
    Flag("--data-dir DIR", "data.data_dir", Path, DATA_DIR_HELP),
    Flag("--index-dir DIR", "data.index_dir", Path, INDEX_DIR_HELP),
]
# fmt: on


def load_eval_config(config: Optional[Path], sets: list[str], overrides: dict[str, Any]) -> Any:
    """The resolved :class:`EvalConfig` (config file < flags < ``--set``); raises ConfigError."""
    from shopping_companion.benchmark.run_config import EvalConfig
    from shopping_companion.config import load_model

    return load_model(EvalConfig, config, sets, overrides, names=flag_names(EVAL_FLAGS))


def print_summary(outcome: Any, retry: str | None = None) -> None:
    """The headline per strategy (Acc, Succ), the report's path and, when episodes errored, how to
    retry them (``retry``: that sentence for a command other than ``shopcomp eval``)."""
    from shopping_companion.benchmark.evaluate import errors_log_path

    summary = outcome.summary
    for name, st in summary["strategies"].items():
        acc, succ = st["all"]["acc"], st["all"]["succ"]
        console.print(
            f"[bold]{escape(name)}[/]  Acc {'–' if acc is None else f'{acc:.3f}'}  "
            f"Succ {'–' if succ is None else f'{succ:.3f}'}  ({st['all']['n']} scored)"
        )
    console.print(
        f"{summary['n_scored']} scored, {summary['n_errors']} errors → {escape(str(outcome.run_dir / 'report.md'))}",
        soft_wrap=True,
    )
    if summary["n_errors"]:
        kinds = summary.get("errors_by_kind") or {}
        console.print(
            f"[yellow]{summary['n_errors']} episode(s) ended with an error[/] ("
            + ", ".join(f"{v} {k}" for k, v in kinds.items())
            + "): not scored. "
            + (
                retry
                or "Rerunning the same command retries backend and judge errors (--no-retry-errors skips them)"
                + (
                    "; episode errors (tracebacks in "
                    + escape(str(errors_log_path(outcome.results_path)))
                    + ") are retried only with --retry-failed"
                    if kinds.get("episode")
                    else ""
                )
            )
            + f". Exit status {EXIT_EPISODE_ERRORS}.",
            soft_wrap=True,
        )


def exit_for(outcome: Any) -> None:
    """Exit :data:`~shopping_companion.errors.EXIT_EPISODE_ERRORS` when a requested episode errored."""
    if outcome.n_errors:
        raise typer.Exit(code=EXIT_EPISODE_ERRORS)


def _list_strategies(value: bool) -> None:
    if value:
        from shopping_companion.benchmark.evaluate import supported_strategies

        print("\n".join(supported_strategies()))
        raise typer.Exit()


def where_episodes_run(cfg: Any) -> str:
    """The run header's line: where the episodes run and where their tools come from."""
    from shopping_companion.assembly.endpoints import scrub_url

    tools = (
        "local tools" if cfg.tools == "local" else f"tools of the service at {scrub_url(cfg.tools[len('serve:') :])}"
    )
    if cfg.ray is None:
        return f"in this process ({cfg.concurrency} in flight, {tools})"
    workers = f"{cfg.ray.workers} worker(s)" if cfg.ray.workers else "one worker per CPU"
    return f"on Ray at {cfg.ray.address} ({workers}, {cfg.concurrency} in flight in all, {tools})"


def _eval(config: Optional[Path], sets: list[str], overrides: dict[str, Any], list_strategies: bool = False) -> None:
    from shopping_companion.benchmark.run import run_benchmark

    cfg = load_eval_config(config, sets, overrides)
    console.print(f"[bold]eval[/] {escape(cfg.output.name)}: episodes run {escape(where_episodes_run(cfg))}")
    outcome = run_benchmark(cfg, console)
    print_summary(outcome)
    exit_for(outcome)


flag_command(
    app,
    "eval",
    EVAL_FLAGS,
    _eval,
    help=f"""Evaluate a policy on a benchmark; resumable (rerun the same command to continue).

    Settings come from --config run.yaml (see configs/eval/), then the flags, then --set key=value.
    The resolved configuration is written to RUNS_DIR/NAME/config.yaml; its hash is the run's
    identity, so resuming with other result-changing settings is refused.

    {LIMITS_HELP}

    Distributed: --ray ADDRESS runs the episodes on Ray episode workers (each builds its policy and
    tools once); this process stays the one writer of the results file, so resume, the lock and the
    identity work as for a local run, and the results for the same seeds equal a local run's. Needs
    Ray (pip install -e ".[serve]"). --tools serve:URL takes the tools and judge from a running
    `shopcomp serve` service (docs/cluster.md).

    Exit status: 0 every requested episode has a result without error; 3 some episodes ended with an
    error (all written; rerun to retry); 2 a configuration or data error; 4 an endpoint is down or
    unreachable (results so far are kept; rerun to resume); 5 another process holds the run; 1 a bug.
    """,
    extra_params=[
        (
            "list_strategies",
            bool,
            typer.Option(
                False,
                "--list-strategies",
                callback=_list_strategies,
                is_eager=True,
                help="Print the supported strategies and exit.",
            ),
        )
    ],
)
