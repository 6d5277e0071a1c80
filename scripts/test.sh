#!/usr/bin/env bash
# The test command (README, CI): the main suite in .venv, then each optional stack's suite
# tests/extras/<name>/ in its own virtual environment .venv-<name> (LLaMA-Factory for SFT, verl +
# TRL for GRPO: their pins clash with each other). A missing extra environment is installed first
# with scripts/install_<name>.sh (a few minutes, once).
#   SHOPCOMP_SKIP_EXTRAS=1   run the main suite only
#   extra arguments          passed to every pytest call (e.g. -x, -k name)
set -euo pipefail
cd "$(dirname "$0")/.."
export SHOPCOMP_REQUIRE_EXTRAS=1  # inside tests/extras a missing stack fails instead of skipping
status=0
.venv/bin/python -m pytest -q "$@" || status=$?
if [ "${SHOPCOMP_SKIP_EXTRAS:-0}" != 1 ]; then
    for dir in tests/extras/*/; do
        name=$(basename "$dir")
        venv=".venv-$name"
        if [ ! -x "$venv/bin/python" ]; then
            echo "== installing $venv for tests/extras/$name (scripts/install_$name.sh)"
            bash "scripts/install_$name.sh"
        fi
        echo "== tests/extras/$name in $venv"
        "$venv/bin/python" -m pytest -q "$dir" "$@" || status=$?
    done
fi
exit $status
