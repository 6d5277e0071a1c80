#!/usr/bin/env bash
# Evaluate a checkpoint end to end: start vLLM's OpenAI-compatible server on it (scripts/serve_vllm.sh),
# wait until GET /v1/models answers, run `shopcomp eval` against it, then stop the server (also on
# failure or Ctrl-C).
#
# Usage:
#   scripts/eval_checkpoint.sh --model PATH --bench BENCH_DIR --name RUN [--lora ADAPTER_DIR]
#                              [--port 8000] [--served-model-name NAME] [--startup-timeout 900]
#                              [--runs-dir runs] [--serve-arg ARG]... [--dry-run] [-- EXTRA_EVAL_ARGS...]
#
# EXTRA_EVAL_ARGS go to `shopcomp eval` (e.g. --strategies all --trials 4 --concurrency 64 --split test).
# With --lora the adapter (served as NAME-lora) is evaluated. The server log is RUNS/RUN/vllm.log.
# --dry-run prints the server command, the readiness URL and the eval command, and runs nothing.
# Environment: VLLM_CMD (vllm executable), SHOPCOMP_CMD (default: shopcomp, else python -m shopping_companion.cli).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }

MODEL="" BENCH="" RUN="" LORA="" PORT=8000 NAME="" TIMEOUT=900 RUNS=runs DRY=0
SERVE_ARGS=() EVAL_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --bench) BENCH="$2"; shift 2 ;;
    --name) RUN="$2"; shift 2 ;;
    --lora) LORA="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --served-model-name) NAME="$2"; shift 2 ;;
    --startup-timeout) TIMEOUT="$2"; shift 2 ;;
    --runs-dir) RUNS="$2"; shift 2 ;;
    --serve-arg) SERVE_ARGS+=("$2"); shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EVAL_ARGS=("$@"); break ;;
    *) echo "eval_checkpoint.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in MODEL BENCH RUN; do
  [[ -n "${!v}" ]] || { echo "eval_checkpoint.sh: --$(tr 'A-Z' 'a-z' <<< "$v" | sed 's/run/name/') is required (see --help)" >&2; exit 2; }
done
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || { echo "eval_checkpoint.sh: --startup-timeout must be seconds, got $TIMEOUT" >&2; exit 2; }
NAME="${NAME:-$(basename "${MODEL%/}")}"
SERVED="$NAME"; [[ -n "$LORA" ]] && SERVED="${NAME}-lora"
URL="http://127.0.0.1:${PORT}/v1"
PY="${PYTHON:-python3}"
if [[ -n "${SHOPCOMP_CMD:-}" ]]; then read -r -a SHOPCOMP <<< "$SHOPCOMP_CMD"
elif command -v shopcomp >/dev/null 2>&1; then SHOPCOMP=(shopcomp)
else SHOPCOMP=("$PY" -m shopping_companion.cli); fi

SERVE=(bash "$HERE/serve_vllm.sh" --model "$MODEL" --port "$PORT" --served-model-name "$NAME")
[[ -n "$LORA" ]] && SERVE+=(--lora "$LORA")
[[ ${#SERVE_ARGS[@]} -gt 0 ]] && SERVE+=(-- "${SERVE_ARGS[@]}")
EVAL=("${SHOPCOMP[@]}" eval --bench "$BENCH" --name "$RUN" --runs-dir "$RUNS" --backend openai
      --base-url "$URL" --model "$SERVED" ${EVAL_ARGS[@]+"${EVAL_ARGS[@]}"})

if [[ $DRY == 1 ]]; then
  echo "serve: $(bash "$HERE/serve_vllm.sh" --model "$MODEL" --port "$PORT" --served-model-name "$NAME" \
        ${LORA:+--lora "$LORA"} --dry-run ${SERVE_ARGS[@]+-- "${SERVE_ARGS[@]}"})"
  echo "wait:  GET ${URL}/models (up to ${TIMEOUT}s)"
  printf 'eval:  '; printf '%q ' "${EVAL[@]}"; echo
  exit 0
fi

mkdir -p "$RUNS/$RUN"
LOG="$RUNS/$RUN/vllm.log"
"${SERVE[@]}" > "$LOG" 2>&1 &
SERVER_PID=$!
stop_server() {
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  wait "$SERVER_PID" 2>/dev/null || true
}
trap stop_server EXIT
trap 'exit 130' INT TERM

echo "eval_checkpoint.sh: waiting for $URL/models (server pid $SERVER_PID, log $LOG)" >&2
start=$(date +%s)
until "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2).read()' "$URL/models" 2>/dev/null; do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "eval_checkpoint.sh: the server exited before it was ready; last lines of $LOG:" >&2
    tail -n 30 "$LOG" >&2 || true
    exit 1
  fi
  if (( $(date +%s) - start > TIMEOUT )); then
    echo "eval_checkpoint.sh: the server was not ready after ${TIMEOUT}s (log $LOG)" >&2
    exit 1
  fi
  sleep 2
done
echo "eval_checkpoint.sh: server ready after $(( $(date +%s) - start ))s; evaluating $SERVED" >&2
"${EVAL[@]}"
