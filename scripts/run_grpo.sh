#!/usr/bin/env bash
# Launch Shopping Companion GRPO with verl on a Ray cluster (docs/grpo.md).
#
#   scripts/run_grpo.sh head   [--port 6379]                 start a Ray head on this node
#   scripts/run_grpo.sh worker --address HEAD_IP:6379        join this node to the cluster
#   scripts/run_grpo.sh train  [--variant outcome_tool|outcome_only] [--model PATH] [--data DIR] [hydra overrides...]
#                                                            run verl (on the head node; starts a local
#                                                            Ray head first when no cluster is running)
# Multi-node: run `head` on node 0 and `worker --address <node0>:6379` on every other node, then
# `train ... trainer.nnodes=N` on node 0. Every node needs this repository at the same path, the
# package installed (pip install -e ".[verl]" vllm), the benchmark directory, the catalog data
# (SHOPCOMP_DATA_DIR) and the BM25 index (built on first use per node, or shared storage).
# Checkpoints go to trainer.default_local_dir; a rerun with the same experiment resumes from the
# latest one (trainer.resume_mode=auto).
set -euo pipefail
cd "$(dirname "$0")/.."
cmd="${1:-}"; shift || true
PY="${PYTHON:-python}"
case "$cmd" in
  head)
    port=6379
    [ "${1:-}" = "--port" ] && port="$2" && shift 2
    ray start --head --port "$port" --dashboard-host 0.0.0.0 "$@"
    ;;
  worker)
    [ "${1:-}" = "--address" ] || { echo "usage: $0 worker --address HEAD_IP:PORT" >&2; exit 2; }
    ray start --address "$2" "${@:3}"
    ;;
  train)
    variant=outcome_tool; model=""; data=runs/grpo/data
    while [ $# -gt 0 ]; do
      case "$1" in
        --variant) variant="$2"; shift 2 ;;
        --model) model="$2"; shift 2 ;;
        --data) data="$2"; shift 2 ;;
        *) break ;;
      esac
    done
    [ -f "$data/train.parquet" ] || { echo "$data/train.parquet missing: run shopcomp grpo prepare --benchmark DIR --out $data" >&2; exit 2; }
    ray status >/dev/null 2>&1 || ray start --head --disable-usage-stats
    export VLLM_USE_V1=1 HYDRA_FULL_ERROR=1
    args=(--variant "$variant" --data-dir "$data")
    [ -n "$model" ] && args+=(--model "$model")
    # `shopcomp grpo launch` prints the verl command it runs (configs/grpo/<variant>.yaml)
    exec "$PY" -m shopping_companion.trainers.cli launch "${args[@]}" --run "$@"
    ;;
  *)
    sed -n '2,16p' "$0"; exit 2 ;;
esac
