"""``shopcomp``: the command groups assembled (docs/architecture.md, the CLI).

One module per command group registers its commands: ``synth`` (build-index, synth), ``import_tasks``
(import-tasks), ``eval``, ``rescore`` (a run scored again), ``pipeline`` (the training chain),
``agreement`` (judge-agreement), ``quickstart``, ``serve`` (tools and rewards as a Ray Serve service), ``view`` (the web viewer of runs), ``sft``, ``grpo``,
``personalize``. Errors are
caught once, by :class:`~shopping_companion.cli.common.ShopCompGroup`."""

from __future__ import annotations

from typing import Optional

import typer

from shopping_companion import __version__
import shopping_companion.cli.agreement  # noqa: F401 - each module registers its commands on `app`
import shopping_companion.cli.eval  # noqa: F401
import shopping_companion.cli.import_tasks  # noqa: F401
import shopping_companion.cli.pipeline  # noqa: F401
import shopping_companion.cli.quickstart  # noqa: F401
import shopping_companion.cli.rescore  # noqa: F401
import shopping_companion.cli.serve  # noqa: F401
import shopping_companion.cli.synth  # noqa: F401
import shopping_companion.cli.view  # noqa: F401
from shopping_companion.cli.common import app

__all__ = ["app", "main"]


def _version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the package version and exit."
    ),
) -> None:
    """Shopping Companion: long-horizon, preference-grounded shopping agents (benchmark, eval, training)."""


@app.command("version")
def version_cmd() -> None:
    """Print the package version."""
    print(__version__)


def _add_groups() -> None:
    from shopping_companion.cli.grpo import app as grpo_app  # they import heavy stacks lazily
    from shopping_companion.cli.personalize import app as personalize_app
    from shopping_companion.cli.sft import app as sft_app

    app.add_typer(sft_app, name="sft", help="SFT: rejection sampling, step-level examples, LLaMA-Factory export.")
    app.add_typer(grpo_app, name="grpo", help="GRPO: verl parquet datasets and launch (cluster), TRL on one node.")
    app.add_typer(
        personalize_app,
        name="personalize",
        help="Second benchmark: multi-agent personalised RAG over Amazon Reviews 2023 (build, run, eval).",
    )


_add_groups()


def main() -> None:  # pragma: no cover - the console script
    app()
