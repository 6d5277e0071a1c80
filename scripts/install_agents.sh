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
export VENV="${VENV:-.venv-agents}"
# CPU torch, Pyserini without its dependency tree, then the package: scripts/install.sh
EXTRAS=test,verifiers,skyrl bash scripts/install.sh
# the verifiers environment package that vf-eval loads by its id (docs/integrations.md)
source scripts/installer.sh
venv_create "$VENV" python3  # exists already: only chooses the installer again
venv_install "$VENV" --no-deps -e environments/shopping_companion_bench
"$VENV/bin/python" -c "import verifiers, skyrl_gym, shopping_companion_bench; \
print('verifiers', verifiers.__version__, 'skyrl-gym ok')"
