#!/usr/bin/env bash
# Create .venv-rl with verl 0.9.1 (cluster GRPO path), TRL 1.16.0 (one-node GRPO path) and Ray Serve
# (`shopcomp serve`, `shopcomp eval --ray`: docs/cluster.md) next to
# Shopping Companion, for CPU use (CI, laptops): the agent loop, reward function, dataset and TRL
# tests run here. GPU training itself needs vLLM and CUDA torch: on a cluster, install
# `pip install -e ".[verl]" vllm` into the cluster's own environment instead (docs/grpo.md).
#   VENV=path   where to create the virtual environment (default: .venv-rl)
#   PYTHON=...  interpreter to build it from (default: python3)
# Both stacks fit in one environment: verl 0.9.1 pins transformers >5.5.3,<5.11 and TRL 1.16.0
# needs datasets >=4.7; neither conflicts with the other.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-rl}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
# 1. CPU torch first: an unpinned torch would pull a multi-GB CUDA build.
$PIP install -q torch==2.13.0
# 2. Pyserini without its dependency tree (see scripts/install.sh).
$PIP install -q --no-deps "pyserini==1.6.0"
# 3. The package with both RL stacks; constraints.txt keeps the CPU torch.
$PIP install -q -c constraints.txt -e ".[test,lora,verl,trl,serve]"
echo "installed into $VENV"
