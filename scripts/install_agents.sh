#!/usr/bin/env bash
# Create .venv-agents: PrimeIntellect's verifiers 0.4.0 and skyrl-gym 0.4.0 next to Shopping
# Companion, for the adapters of shopping_companion/integrations/ (docs/integrations.md) and their
# suite tests/extras/agents/. Both fit in one environment (verifiers pins openai>=2, skyrl-gym
# only numpy/omegaconf); neither needs torch, which comes with our package (CPU build, as in
# scripts/install.sh).
#   VENV=path   where to create the virtual environment (default: .venv-agents)
#   PYTHON=...  interpreter to build it from (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-agents}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
# 1. CPU torch first: an unpinned torch would pull a multi-GB CUDA build.
$PIP install -q torch==2.13.0
# 2. Pyserini without its dependency tree (see scripts/install.sh).
$PIP install -q --no-deps "pyserini==1.6.0"
# 3. The package with both agent stacks; constraints.txt keeps the CPU torch.
$PIP install -q -c constraints.txt -e ".[test,verifiers,skyrl]"
# 4. The verifiers environment package (taskset id shopping-companion-bench): verifiers imports it
#    by that name; its code is shopping_companion.integrations.verifiers.
$PIP install -q --no-deps -e environments/shopping_companion_bench
# 5. Smoke check: the pieces the suite imports.
"$VENV/bin/python" -c "import verifiers, skyrl_gym, shopping_companion_bench; \
print('verifiers', verifiers.__version__, 'skyrl-gym ok')"
echo "installed into $VENV"
