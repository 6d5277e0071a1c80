#!/usr/bin/env bash
# Create .venv-inspect: Inspect AI 0.3.285 (`inspect eval`, `inspect view`) + Shopping Companion,
# for CPU use (CI, laptops). Inspect needs Python >= 3.11 and pulls its own web, cloud-storage and
# terminal-UI dependencies (fastapi, s3fs, textual, ...), so it gets an environment of its own
# rather than growing .venv. docs/integrations.md, "Inspect AI".
#   VENV=path   where to create the virtual environment (default: .venv-inspect)
#   PYTHON=...  interpreter to build it from (default: python3; 3.11 or newer)
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV="${VENV:-.venv-inspect}"
# CPU torch, Pyserini without its dependency tree, then the package: scripts/install.sh
EXTRAS=test,inspect bash scripts/install.sh
"$VENV/bin/python" -c "import inspect_ai, shopping_companion.integrations.inspect; print('inspect_ai', inspect_ai.__version__)"
