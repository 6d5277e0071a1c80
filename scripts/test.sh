#!/usr/bin/env bash
# The test command (README, CI): ruff (lint; format check once enabled), then the main suite in
# .venv, then each optional stack's suite tests/extras/<name>/ in its own virtual environment
# .venv-<name> (LLaMA-Factory for SFT, verl + TRL for GRPO: their pins clash with each other), then
# tests/extras/pipeline (the whole training chain) in .venv, driving the other two. A missing extra
# environment is installed first with scripts/install_<name>.sh (a few minutes, once).
#   SHOPCOMP_SKIP_EXTRAS=1   run the main suite only
#   SHOPCOMP_SKIP_LINT=1     skip ruff
#   CI=1 (or any value)      run as CI does: output 80 columns wide (COLUMNS=80), so every message
#                            a test matches must survive an 80-column terminal
#   extra arguments          passed to every pytest call (e.g. -x, -k name)
set -euo pipefail
cd "$(dirname "$0")/.."
export SHOPCOMP_REQUIRE_EXTRAS=1  # inside tests/extras a missing stack fails instead of skipping
if [ -n "${CI:-}" ]; then
    export COLUMNS=80
fi
# `ruff format --check` is part of the lint step (SHOPCOMP_FORMAT_CHECK=0 skips it).
FORMAT_CHECK="${SHOPCOMP_FORMAT_CHECK:-1}"
status=0
if [ "${SHOPCOMP_SKIP_LINT:-0}" != 1 ]; then
    if [ ! -x .venv/bin/ruff ]; then  # a .venv made before ruff joined the test extra
        echo "== installing the test extra into .venv (ruff; scripts/install.sh does the same)"
        .venv/bin/python -m pip install -q -c constraints.txt -e ".[test,lora]"
    fi
    echo "== ruff check"
    .venv/bin/ruff check . || status=$?
    if [ "$FORMAT_CHECK" = 1 ]; then
        echo "== ruff format --check"
        .venv/bin/ruff format --check . || status=$?
    fi
fi
.venv/bin/python -m pytest -q "$@" || status=$?
if [ "${SHOPCOMP_SKIP_EXTRAS:-0}" != 1 ]; then
    for dir in tests/extras/*/; do
        name=$(basename "$dir")
        [ "$name" = pipeline ] && continue  # needs every stack: runs last, below
        venv=".venv-$name"
        if [ ! -x "$venv/bin/python" ]; then
            echo "== installing $venv for tests/extras/$name (scripts/install_$name.sh)"
            bash "scripts/install_$name.sh"
        fi
        echo "== tests/extras/$name in $venv"
        "$venv/bin/python" -m pytest -q "$dir" "$@" || status=$?
    done
    # the whole training chain (shopcomp pipeline) runs in .venv and drives .venv-sft and .venv-rl
    if [ -d tests/extras/pipeline ]; then
        for name in sft rl; do
            if [ ! -x ".venv-$name/bin/python" ]; then
                echo "== installing .venv-$name for tests/extras/pipeline (scripts/install_$name.sh)"
                bash "scripts/install_$name.sh"
            fi
        done
        echo "== tests/extras/pipeline in .venv (with .venv-sft and .venv-rl)"
        .venv/bin/python -m pytest -q tests/extras/pipeline "$@" || status=$?
    fi
fi
exit $status
