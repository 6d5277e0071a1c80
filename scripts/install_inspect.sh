#!/usr/bin/env bash
# Create .venv-inspect: Inspect AI 0.3.285 (`inspect eval`, `inspect view`) + Shopping Companion,
# for CPU use (CI, laptops). Inspect needs Python >= 3.11 and pulls its own web, cloud-storage and
# terminal-UI dependencies (fastapi, s3fs, textual, ...), so it gets an environment of its own
# rather than growing .venv. docs/integrations.md, "Inspect AI".
#   VENV=path   where to create the virtual environment (default: .venv-inspect)
#   PYTHON=...  interpreter to build it from (default: python3; 3.11 or newer)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-inspect}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
PIP="$PY -m pip"
$PIP install -q --upgrade pip
# 1. CPU torch first: an unpinned torch would pull a multi-GB CUDA build (scripts/install.sh).
$PIP install -q torch==2.13.0
# 2. Pyserini without its dependency tree (see scripts/install.sh).
$PIP install -q --no-deps "pyserini==1.6.0"
# 3. The package with the inspect extra; constraints.txt keeps the CPU torch. Installing the
#    package registers its `inspect_ai` entry point, so `inspect eval shopping_companion/bench` finds
#    the task.
$PIP install -q -c constraints.txt -e ".[test,inspect]"
# 4. Smoke check: Inspect imports and sees our task.
$PY -c "import inspect_ai, shopping_companion.integrations.inspect; print('inspect_ai', inspect_ai.__version__)"
echo "installed into $VENV"
