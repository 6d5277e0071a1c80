#!/usr/bin/env bash
# Serve a checkpoint (optionally with a LoRA adapter) with vLLM's OpenAI-compatible server, with the
# settings `shopcomp eval` needs: Hermes tool-call parsing (<tool_call>{...}</tool_call>) and, for Qwen3
# thinking models, the qwen3 reasoning parser (the <think> block is returned apart as reasoning).
#
# Usage:
#   scripts/serve_vllm.sh --model PATH_OR_HUB_ID [--lora ADAPTER_DIR] [--port 8000] [--host 127.0.0.1]
#                         [--served-model-name NAME] [--reasoning-parser auto|qwen3|none]
#                         [--tensor-parallel-size N] [--max-model-len N] [--gpu-memory-utilization F]
#                         [--max-lora-rank 64] [--dry-run] [-- EXTRA_VLLM_ARGS...]
#
# The model is served as NAME (default: the directory name of --model). With --lora the adapter is
# served as NAME-lora next to the base model: evaluate the adapter with `--model NAME-lora`.
# --reasoning-parser auto picks qwen3 when the model name contains "qwen3" (case-insensitive), else none.
# --dry-run prints the command instead of running it. VLLM_CMD overrides the executable (default: vllm).
set -euo pipefail

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }

MODEL="" LORA="" PORT=8000 HOST=127.0.0.1 NAME="" REASONING=auto TP="" MAXLEN="" GPU_UTIL="" LORA_RANK=64 DRY=0
EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --lora) LORA="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --host) HOST="$2"; shift 2 ;;
    --served-model-name) NAME="$2"; shift 2 ;;
    --reasoning-parser) REASONING="$2"; shift 2 ;;
    --tensor-parallel-size) TP="$2"; shift 2 ;;
    --max-model-len) MAXLEN="$2"; shift 2 ;;
    --gpu-memory-utilization) GPU_UTIL="$2"; shift 2 ;;
    --max-lora-rank) LORA_RANK="$2"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "serve_vllm.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$MODEL" ]] || { echo "serve_vllm.sh: --model is required (see --help)" >&2; exit 2; }
[[ "$PORT" =~ ^[0-9]+$ ]] || { echo "serve_vllm.sh: --port must be a number, got $PORT" >&2; exit 2; }
[[ -z "$LORA" || -d "$LORA" || $DRY == 1 ]] || { echo "serve_vllm.sh: LoRA adapter directory $LORA does not exist" >&2; exit 2; }
NAME="${NAME:-$(basename "${MODEL%/}")}"
case "$REASONING" in
  auto) if [[ "${MODEL,,}" == *qwen3* || "${NAME,,}" == *qwen3* ]]; then REASONING=qwen3; else REASONING=none; fi ;;
  qwen3|none|deepseek_r1|granite) ;;
  *) echo "serve_vllm.sh: --reasoning-parser must be auto, qwen3, none, deepseek_r1 or granite (got $REASONING)" >&2; exit 2 ;;
esac

read -r -a VLLM <<< "${VLLM_CMD:-vllm}"
CMD=("${VLLM[@]}" serve "$MODEL" --host "$HOST" --port "$PORT" --served-model-name "$NAME"
     --enable-auto-tool-choice --tool-call-parser hermes)
[[ "$REASONING" != none ]] && CMD+=(--reasoning-parser "$REASONING")
if [[ -n "$LORA" ]]; then
  CMD+=(--enable-lora --max-lora-rank "$LORA_RANK" --lora-modules "${NAME}-lora=${LORA}")
fi
[[ -n "$TP" ]] && CMD+=(--tensor-parallel-size "$TP")
[[ -n "$MAXLEN" ]] && CMD+=(--max-model-len "$MAXLEN")
[[ -n "$GPU_UTIL" ]] && CMD+=(--gpu-memory-utilization "$GPU_UTIL")
CMD+=(${EXTRA[@]+"${EXTRA[@]}"})

if [[ $DRY == 1 ]]; then
  printf '%q ' "${CMD[@]}"; echo
  exit 0
fi
exec "${CMD[@]}"
