#!/usr/bin/env bash
# Launch Shopping Companion GRPO with verl on a Ray cluster (docs/grpo.md).
#
#   scripts/run_grpo.sh head   [--port 6379] [--dashboard-host ADDR] [ray start options...]
#                                                            start a Ray head on this node; its dashboard
#                                                            (and Ray's unauthenticated job-submission API)
#                                                            listens on 127.0.0.1 only, unless ADDR (or
#                                                            $SHOPCOMP_RAY_DASHBOARD_HOST) says otherwise
#   scripts/run_grpo.sh worker --address HEAD_IP:6379        join this node to the cluster
#   scripts/run_grpo.sh train  [--variant outcome_tool|outcome_only] [--model PATH] [--data DIR] [hydra overrides...]
#                                                            run verl (on the head node; starts a local
#                                                            Ray head first when no cluster is running)
#   scripts/run_grpo.sh submit [--variant V] [--model PATH] [--data DIR] [--address URL] [--smoke] [grpo submit options...] [hydra overrides...]
#                                                            submit verl to the running cluster as a Ray job
#                                                            (`shopcomp grpo submit`: --check first, ships this
#                                                            package and the reward spec's modules; prints the
#                                                            job id and the ray job logs/status/stop commands)
# Multi-node: run `head` on node 0 and `worker --address <node0>:6379` on every other node, then
# `submit ... trainer.nnodes=N` (docs/grpo.md, "2 nodes x 8 GPUs"). Every node needs the package's
# dependencies installed (pip install -e ".[verl]" vllm; `submit` ships this checkout's code), the
# benchmark directory, the rows, the catalog data (SHOPCOMP_DATA_DIR) and the BM25 index at the same
# paths (shared storage). `train` runs the command on node 0 itself: then every node also needs this
# repository at the same path. Checkpoints go to trainer.default_local_dir
# ($SHOPCOMP_CKPT_DIR/<project>/<experiment>: shared storage on several nodes); a rerun with the same
# experiment resumes from the latest one (trainer.resume_mode=auto).
# Environment: PYTHON (default: `python` when it imports verl and this package, else .venv-rl/bin/python);
# verl and `ray` run from that interpreter's environment. SHOPCOMP_RAY_DASHBOARD_HOST: the dashboard
# address (default 127.0.0.1; anything else lets every host that reaches it submit jobs: a warning is
# printed). To see a remote head's dashboard, tunnel it: ssh -L 8265:127.0.0.1:8265 NODE0.
set -euo pipefail
caller="$PWD"
cd "$(dirname "$0")/.."
# a relative --data / --model that exists from the caller's directory means that path (not one under the repo)
from_caller() { case "$1" in /*) echo "$1" ;; *) if [ -e "$caller/$1" ]; then echo "$caller/$1"; else echo "$1"; fi ;; esac; }
cmd="${1:-}"; shift || true
. scripts/rl_python.sh   # PY and RAY: verl's interpreter and its ray
need() { [ $# -ge 2 ] && [ -n "$2" ] || { echo "$1: needs a value" >&2; exit 2; }; }
case "$cmd" in
  head)
    port=6379; dash="${SHOPCOMP_RAY_DASHBOARD_HOST:-127.0.0.1}"
    while [ $# -gt 0 ]; do
      case "$1" in
        --port) need "$@"; port="$2"; shift 2 ;;
        --dashboard-host) need "$@"; dash="$2"; shift 2 ;;
        *) break ;;
      esac
    done
    case "$dash" in
      127.0.0.1|localhost|::1) ;;
      *) echo "WARNING: Ray's dashboard will listen on $dash: anyone who reaches $dash:8265 can submit jobs" \
              "(run any command on this cluster) through Ray's unauthenticated job API. Use it only on a trusted" \
              "network; the default 127.0.0.1 plus an SSH tunnel is safer." >&2 ;;
    esac
    "$RAY" start --head --port "$port" --dashboard-host "$dash" "$@"
    ;;
  worker)
    [ "${1:-}" = "--address" ] || { echo "usage: $0 worker --address HEAD_IP:PORT" >&2; exit 2; }
    need "$@"
    "$RAY" start --address "$2" "${@:3}"
    ;;
  train)
    variant=outcome_tool; model=""; data=runs/grpo/data
    while [ $# -gt 0 ]; do
      case "$1" in
        --variant) need "$@"; variant="$2"; shift 2 ;;
        --model) need "$@"; model="$(from_caller "$2")"; shift 2 ;;
        --data) need "$@"; data="$(from_caller "$2")"; shift 2 ;;
        *) break ;;
      esac
    done
    [ -f "$data/train.parquet" ] || { echo "$data/train.parquet missing: run shopcomp grpo prepare --bench DIR --out $data" >&2; exit 2; }
    "$RAY" status >/dev/null 2>&1 || "$RAY" start --head --disable-usage-stats --dashboard-host 127.0.0.1
    export VLLM_USE_V1=1 HYDRA_FULL_ERROR=1
    args=(--variant "$variant" --rows-dir "$data")
    [ -n "$model" ] && args+=(--model "$model")
    # `shopcomp grpo launch` prints the verl command it runs (configs/grpo/<variant>.yaml)
    exec "$PY" -m shopping_companion.cli.grpo launch "${args[@]}" --run "$@"
    ;;
  submit)
    args=()
    while [ $# -gt 0 ]; do
      case "$1" in
        --model) need "$@"; args+=(--model "$(from_caller "$2")"); shift 2 ;;
        --data) need "$@"; args+=(--rows-dir "$(from_caller "$2")"); shift 2 ;;
        *) break ;;
      esac
    done
    exec "$PY" -m shopping_companion.cli.grpo submit ${args[@]+"${args[@]}"} "$@"
    ;;
  *)
    sed -n '2,/^set -e/p' "$0" | grep '^#'; exit 2 ;;
esac
