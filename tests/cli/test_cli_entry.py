"""The ``shopcomp`` entry points and help pages: ``--version``, ``python -m shopping_companion.cli``,
a command group run alone with ``python -m`` (no double import warning), and every help page
readable at 80 columns (no line wider, no option name broken at a hyphen, no ``<bool>`` /
``<str>`` type noise)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from shopping_companion import __version__
from shopping_companion.cli import app

COMMANDS = [
    [],
    ["eval"],
    ["rescore"],
    ["quickstart"],
    ["synth"],
    ["build-index"],
    ["judge-agreement"],
    ["sft"],
    ["sft", "collect"],
    ["sft", "export"],
    ["sft", "stats"],
    ["grpo"],
    ["grpo", "prepare"],
    ["grpo", "launch"],
    ["personalize"],
    ["personalize", "build"],
    ["personalize", "run"],
    ["personalize", "eval"],
]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_version_and_module_entry_points():
    assert CliRunner().invoke(app, ["--version"]).output.strip() == __version__
    r = _run("-m", "shopping_companion.cli", "--version")
    assert r.returncode == 0 and r.stdout.strip() == __version__, r.stderr
    r = _run("-m", "shopping_companion.cli.grpo", "--help")  # scripts/run_grpo.sh runs the group this way
    assert r.returncode == 0 and "prepare" in r.stdout and "RuntimeWarning" not in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "shopcomp")
def test_help_is_readable_at_80_columns(cmd):
    r = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert not [line for line in lines if re.search(r"[a-z]-$", line)], "a word or option broken at a hyphen"
    assert not re.search(r"<(bool|str|int|float|path)>|\bTEXT\b|\bINTEGER\b", r.output)
