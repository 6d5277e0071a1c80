#!/usr/bin/env bash
# GPU smoke test of the verl GRPO path (one GPU, < 10 minutes): a few GRPO steps of a small model
# on a handful of tasks, then throughput figures. NOT RUN in development (no GPU there); written
# from verl 0.9.1's config (the same configs/grpo/*.yaml the CPU tests compose) — see docs/grpo.md.
#
#   MODEL=/path/to/Qwen3-0.6B BENCH=runs/bench scripts/gpu_smoke.sh [extra hydra overrides]
#   CHECK_ONLY=1 MODEL=... scripts/gpu_smoke.sh     # prepare the rows and check the config on CPU, then stop
#
# Settings: configs/grpo/gpu_smoke.yaml (outcome_tool scaled to one GPU: 4 prompts x 4 rollouts,
# 4,096-token responses, 6 turns, full fine-tuning); extra arguments are Hydra overrides.
# Needs: CUDA, `pip install -e ".[verl]" vllm` (vLLM matching verl 0.9.1), a benchmark directory
# (shopcomp synth --out runs/bench --n-tasks 20), the catalog data, and a local model directory
# (no downloads). Prints tokens/s, steps/s and the share of rollout time spent in our environment
# (agent_loop/tool_calls = environment time per trajectory, agent_loop/generate_sequences = model).
set -euo pipefail
caller="$(pwd)"
cd "$(dirname "$0")/.."
# relative MODEL / BENCH / OUT are taken from the caller's directory (the script runs from the repo root)
from_caller() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }
[ -n "${MODEL:-}" ] || { echo "MODEL: set it to a local model directory, e.g. MODEL=/models/Qwen3-0.6B" >&2; exit 2; }
MODEL="$(from_caller "$MODEL")"
BENCH="$(from_caller "${BENCH:-runs/bench}")"
OUT="$(from_caller "${OUT:-runs/gpu_smoke}")"
STEPS="${STEPS:-3}"
. scripts/rl_python.sh   # PY and RAY: verl's interpreter and its ray
mkdir -p "$OUT"
"$PY" -m shopping_companion.cli.grpo prepare --bench "$BENCH" --out "$OUT/data" --limit 4 >/dev/null
export WANDB_MODE=offline HYDRA_FULL_ERROR=1 VLLM_USE_V1=1
# the config composed and checked on CPU first (verl's validate_config, data, model, agent loop,
# reward function, estimator): a mistake costs seconds here instead of minutes of GPU start-up
"$PY" -m shopping_companion.cli.grpo launch --variant gpu_smoke --model "$MODEL" --rows-dir "$OUT/data" --check \
  trainer.default_local_dir="$OUT/ckpt" trainer.total_training_steps="$STEPS" "$@"
if [ "${CHECK_ONLY:-0}" = 1 ]; then exit 0; fi   # e.g. on a login node before asking for a GPU
"$RAY" status >/dev/null 2>&1 || "$RAY" start --head --num-gpus 1 --disable-usage-stats >/dev/null
start=$(date +%s)
"$PY" -m shopping_companion.cli.grpo launch --variant gpu_smoke --model "$MODEL" --rows-dir "$OUT/data" --run \
  trainer.default_local_dir="$OUT/ckpt" trainer.total_training_steps="$STEPS" "$@" 2>&1 | tee "$OUT/train.log"
end=$(date +%s)
"$PY" - "$OUT/train.log" "$STEPS" "$((end - start))" <<'PYEOF'
import re, sys, statistics
log, steps, wall = open(sys.argv[1]).read(), int(sys.argv[2]), int(sys.argv[3])
def vals(key):
    return [float(m) for m in re.findall(re.escape(key) + r":\s*([-+0-9.eE]+)", log)]
step_s = vals("timing_s/step"); tps = vals("perf/throughput")
env = vals("agent_loop/tool_calls/mean"); gen = vals("agent_loop/generate_sequences/mean")
print(f"wall {wall} s for {steps} steps (incl. start-up)")
if step_s:
    print(f"steps/s {1 / statistics.median(step_s):.3f} (median step {statistics.median(step_s):.1f} s)")
if tps:
    print(f"tokens/s per GPU {statistics.median(tps):.0f}")
if env and gen:
    share = [e / (e + g) for e, g in zip(env, gen) if e + g > 0]
    print(f"environment share of rollout time per trajectory {100 * statistics.median(share):.1f}% "
          f"(env {statistics.median(env):.2f} s, generation {statistics.median(gen):.2f} s)")
for k in ("critic/score/mean", "timing_s/shopcomp/R_z/mean", "timing_s/shopcomp/R_tool/mean",
          "timing_s/shopcomp/R_fmt/mean", "timing_s/shopcomp/success/mean", "timing_s/shopcomp/judge_failed/count"):
    if vals(k):
        print(f"{k} {vals(k)}")
PYEOF
