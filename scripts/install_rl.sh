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
export VENV="${VENV:-.venv-rl}"
# CPU torch, Pyserini without its dependency tree, then the package: scripts/install.sh
EXTRAS=test,lora,verl,trl,serve bash scripts/install.sh
