#!/usr/bin/env bash
# LoRA SFT with LLaMA-Factory on a config written by `shopcomp sft export` (Shopping Companion §6.1, App. D).
#
#   scripts/run_sft.sh runs/sft/export/train_lora.yaml [key=value ...]
#
# Single GPU / CPU: runs `llamafactory-cli train CONFIG` as is (CPU: pass use_cpu=true bf16=false).
# Several GPUs on one node (the paper: 8 x H20):
#   NPROC_PER_NODE=8 scripts/run_sft.sh CONFIG                       # torchrun DDP
#   NPROC_PER_NODE=8 DEEPSPEED=configs/sft/ds_z2.json scripts/run_sft.sh CONFIG   # + DeepSpeed ZeRO-2
# Several nodes: also NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT (LLaMA-Factory's launcher reads them).
# Afterwards, merge the adapter for the RL stage (or pass the adapter directory instead; docs/sft.md):
#   llamafactory-cli export <export dir>/merge_lora.yaml
# Environment: LLAMAFACTORY_CLI (default: llamafactory-cli on PATH, else .venv-sft/bin/llamafactory-cli).
set -euo pipefail
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
    echo "usage: $0 TRAIN_YAML [key=value ...]   (TRAIN_YAML from \`shopcomp sft export\`)" >&2
    exit 2
fi
CONFIG="$1"; shift
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CLI="${LLAMAFACTORY_CLI:-$(command -v llamafactory-cli || echo "$ROOT/.venv-sft/bin/llamafactory-cli")}"
[ -x "$CLI" ] || { echo "llamafactory-cli not found; install with scripts/install_sft.sh" >&2; exit 2; }
EXTRA=()
if [ -n "${DEEPSPEED:-}" ]; then
    [ -f "$DEEPSPEED" ] || { echo "DEEPSPEED=$DEEPSPEED: no such file" >&2; exit 2; }
    EXTRA+=("deepspeed=$(cd "$(dirname "$DEEPSPEED")" && pwd)/$(basename "$DEEPSPEED")")
fi
if [ "${NPROC_PER_NODE:-1}" -gt 1 ] || [ "${NNODES:-1}" -gt 1 ]; then
    export FORCE_TORCHRUN=1
fi
echo "llamafactory-cli train $CONFIG ${EXTRA[*]:-} $* (NPROC_PER_NODE=${NPROC_PER_NODE:-1}, NNODES=${NNODES:-1})" >&2
exec "$CLI" train "$CONFIG" "${EXTRA[@]}" "$@"
