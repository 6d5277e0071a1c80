"""What every ``shopcomp`` command shares: the console, the one error handler, the ``--config`` /
``--set`` options and the plain-text help style (readable at 80 columns and in log files)."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any, Optional

import typer
import typer.core
from rich.text import Text

from shopping_companion.console import console
from shopping_companion.errors import EXIT_CRASH, ConfigError, ShopCompError

__all__ = [
    "DATA_DIR_HELP",
    "Flag",
    "INDEX_DIR_HELP",
    "ShopCompGroup",
    "app",
    "config_option",
    "console",
    "data_dir_option",
    "deprecated_alias",
    "echo_error",
    "flag_command",
    "flag_names",
    "index_dir_option",
    "new_app",
    "option",
    "pick",
    "set_option",
    "sets_of",
]


def echo_error(message: str, code: int | None = None) -> None:
    """Print ``error: <message>`` as plain text (no Rich markup or emoji codes: a model named "x" made
    ":x:" an emoji) and never hard-wrapped (a log file keeps whole lines; a terminal wraps them)."""
    console.print(Text.assemble(("error: ", "bold red"), str(message)), soft_wrap=True)


class ShopCompGroup(typer.core.TyperGroup):
    """The command group that catches errors once for every command and sub-command:
    a :class:`~shopping_companion.errors.ShopCompError` prints its message and exits with its
    ``exit_code``; an ``OSError`` (disk full, permission denied) prints its message and exits 2;
    ``KeyboardInterrupt`` exits 130; anything else is a bug: the traceback is printed, exit 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.exceptions.TyperException):
            raise  # usage errors, --help, explicit exits: typer prints them
        except ShopCompError as e:
            echo_error(str(e))
            raise typer.Exit(e.exit_code) from None
        except OSError as e:
            echo_error(f"{e.strerror or e}" + (f": {e.filename}" if getattr(e, "filename", None) else ""))
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            echo_error("interrupted; what was written is kept (rerun the same command to resume)")
            raise typer.Exit(130) from None
        except Exception:  # noqa: BLE001 - a bug: show where
            traceback.print_exc(file=sys.stderr)
            raise typer.Exit(EXIT_CRASH) from None


def new_app(help: str, **kw: Any) -> typer.Typer:
    """A ``typer.Typer`` in the house style: plain click help (no boxes, nothing cut off at 80
    columns), ``-h`` as well as ``--help``, no shell-completion options."""
    return typer.Typer(
        cls=ShopCompGroup,
        add_completion=False,
        no_args_is_help=True,
        rich_markup_mode=None,
        help=help,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
        **kw,
    )


#: The ``shopcomp`` command group; the command modules register on it, ``cli.root`` assembles them.
app = new_app("Shopping Companion: long-horizon, preference-grounded shopping agents (benchmark, eval, training).")


def config_option(what: str = "the run") -> Any:
    return typer.Option(
        None, "--config", "-c", metavar="YAML", help=f"YAML config of {what}; flags and --set override it."
    )


#: The help of ``--data-dir`` (the raw data directory), the same in every command that takes it.
DATA_DIR_HELP = "Raw data directory (default $SHOPCOMP_DATA_DIR, ../shared/data)."
#: The help of ``--index-dir`` (the BM25 index) in the commands that search the catalog.
INDEX_DIR_HELP = "BM25 index directory (default: the cache)."


def data_dir_option() -> Any:
    """``--data-dir DIR``: the raw data directory (:data:`DATA_DIR_HELP`), not given by default."""
    return option(None, "--data-dir", metavar="DIR", help=DATA_DIR_HELP)


def index_dir_option() -> Any:
    """``--index-dir DIR``: the BM25 index directory (:data:`INDEX_DIR_HELP`), not given by default."""
    return option(None, "--index-dir", metavar="DIR", help=INDEX_DIR_HELP)


def set_option() -> Any:
    return typer.Option(
        None,
        "--set",
        metavar="KEY=VALUE",
        help="Override one config value (dotted key, YAML value); repeatable, applied last.",
    )


def option(default: Any, *names: str, help: str, **kw: Any) -> Any:
    """A ``typer.Option`` in the house style: ``help`` states the default in words ("(default 4)",
    "(paper; default)"), so click's ``[default: ...]`` suffix is off."""
    return typer.Option(default, *names, help=help, show_default=False, **kw)


def deprecated_alias(
    value: Optional[Path], alias: Optional[Path], name: str, old: str, why: str = ""
) -> Optional[Path]:
    """``value`` of option ``name``, or the deprecated ``old`` spelling's (printing a note that
    ``old`` is deprecated, with ``why``); both given and different is a
    :class:`~shopping_companion.errors.ConfigError`."""
    if alias is None:
        return value
    console.print(f"[yellow]note:[/] {old} is deprecated; use {name}{why}", soft_wrap=True)
    if value is not None and Path(value) != Path(alias):
        raise ConfigError(f"{name} {value} and {old} {alias} disagree; give {name} only")
    return alias


def sets_of(values: Optional[list[str]]) -> list[str]:
    return list(values or [])


class Flag:
    """One command-line flag that overrides one config key.

    ``usage``: the flag as its help line shows it: option names, comma-separated, then the metavar
    (``"--max-turns N"``, ``"--run-name, --name NAME"``), or for an on/off pair, which takes no
    value, ``"--retry-errors/--no-retry-errors"``; ``key``: the dotted config key it sets; ``type``:
    ``str``, ``int``, ``float``, ``bool`` or ``Path``; ``help``: one line. Every flag defaults to
    "not given" (``None``), so only flags the user typed override the config."""

    def __init__(self, usage: str, key: str, type: Any, help: str, param: str | None = None, **extra: Any) -> None:
        *names, last = usage.replace(",", " ").split()
        if last.startswith("-"):
            names.append(last)
            last = None
        self.usage = usage
        self.names = tuple(names)
        self.metavar = last
        self.key = key
        self.type = type
        self.help = help
        self.extra = extra
        self.param = param or self.names[0].split("/")[0].lstrip("-").replace("-", "_")

    def under(self, prefix: str) -> "Flag":
        """The same flag setting ``prefix + key`` (e.g. ``eval.`` for the quickstart's eval section)."""
        return Flag(self.usage, prefix + self.key, self.type, self.help, self.param, **self.extra)


def pick(flags: list[Flag], *keys: str, prefix: str = "") -> list[Flag]:
    """The flags of ``flags`` that set ``keys`` (in that order), each moved ``under(prefix)``."""
    by_key = {f.key: f for f in flags}
    return [by_key[k].under(prefix) for k in keys]


def flag_names(flags: list[Flag]) -> dict[str, str]:
    """``{dotted key: "--flag"}`` of ``flags`` (for error messages that name what the user typed)."""
    return {f.key: f.names[0].split("/")[0] for f in flags}


def flag_command(
    app: typer.Typer,
    name: str,
    flags: list[Flag],
    handler: Any,
    *,
    help: str,
    extra_params: list[tuple[str, Any, Any]] = (),
    config_what: str = "the run",
) -> None:
    """Register command ``name`` on ``app`` whose options are ``flags`` (plus ``--config``, whose
    help names ``config_what``, and ``--set``, and ``extra_params`` as
    ``(name, annotation, typer.Option(...))``); when run it calls
    ``handler(config_path, sets, overrides, **extra)`` with ``overrides`` = ``{dotted key: value}``
    of the flags the user gave. One table instead of a parameter list copied from function to
    function."""
    import inspect

    params = [
        inspect.Parameter(
            "config", inspect.Parameter.KEYWORD_ONLY, default=config_option(config_what), annotation=Optional[Path]
        ),
        inspect.Parameter("set_", inspect.Parameter.KEYWORD_ONLY, default=set_option(), annotation=Optional[list[str]]),
    ]
    for f in flags:
        opt = typer.Option(None, *f.names, help=f.help, metavar=f.metavar, show_default=False, **f.extra)
        params.append(
            inspect.Parameter(f.param, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=Optional[f.type])
        )
    for pname, ann, opt in extra_params:
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann))
    by_param = {f.param: f for f in flags}
    extra_names = {p for p, _, _ in extra_params}

    def command(**kwargs: Any) -> Any:
        overrides = {by_param[k].key: v for k, v in kwargs.items() if k in by_param and v is not None}
        extra = {k: v for k, v in kwargs.items() if k in extra_names}
        return handler(kwargs.get("config"), sets_of(kwargs.get("set_")), overrides, **extra)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = help
    command.__name__ = name.replace("-", "_")
    app.command(name, help=help)(command)
