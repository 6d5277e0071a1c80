#!/usr/bin/env bash
# The test command (README, CI): ruff (lint; format check once enabled), then the main suite in
# .venv, then each optional stack's suite tests/extras/<name>/ in its own virtual environment
# .venv-<name> (LLaMA-Factory for SFT, verl + TRL for GRPO: their pins clash with each other), then
# tests/extras/pipeline (the whole training chain) in .venv, driving the other two. A missing extra
# environment is installed with scripts/install_<name>.sh (a few minutes, once), in the background
# while lint and the main suite run.
#   SHOPCOMP_SKIP_EXTRAS=1   run the main suite only
#   SHOPCOMP_SKIP_LINT=1     skip ruff
#   CI=1 (or any value)      run as CI does: output 80 columns wide (COLUMNS=80), so every message
#                            a test matches must survive an 80-column terminal
#   SHOPCOMP_TEST_WORKERS=N  run the main suite in N processes (pytest-xdist, whole files per
#                            worker; the session fixtures' catalog cache, BM25 index and MiniLM
#                            encodings are built once and shared through the session's cache
#                            directory: tests/conftest.py, session_dir); 0: one process; default:
#                            2 on a machine with 2 or more cores (the reference CI machine has 2:
#                            670 s instead of 845 s for the main suite), else 0
#   SHOPCOMP_EXTRAS_LANES=N  run the extras suites in N lanes at once (default 3: tests/extras/rl,
#                            which mostly waits on Ray, beside two lanes of the others; 1: one
#                            after another; more lanes than suites: one suite a lane); each
#                            lane's output printed as it ends
#   SHOPCOMP_TEST_SHARED_DIR the session fixtures' directory, shared by every suite of this run
#                            (tests/conftest.py, session_dir): the main suite builds the catalog
#                            cache, the BM25 index and the MiniLM encodings once, the extras suites
#                            reuse them (keyed by content hash and code versions: a stale entry is
#                            rebuilt). Default: a fresh temporary directory, removed at the end
#   extra arguments          passed to every pytest call (e.g. -x, -k name)
# Every phase (each install, lint, each suite) prints "== phase NAME: 12.3 s (exit 0, CPU busy
# 97%)" as it ends (CPU busy: the whole machine's, lanes beside it included),
# and all of them again with the total at the end, so a slow phase shows in the log the day it
# lands; the main suite also lists its 25 slowest tests (--durations).
set -euo pipefail
cd "$(dirname "$0")/.."
t_start=$EPOCHREALTIME
phase_lines=()
# cpu_ticks: "BUSY TOTAL" jiffies of the whole machine (/proc/stat; "0 0" where there is none)
cpu_ticks() {
    awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8; found = 1 }
        END { if (!found) print 0, 0 }' /proc/stat 2>/dev/null || echo 0 0
}
# timed NAME command...: run the command, print its phase line, return its exit status. The line
# gives the wall time and how busy the machine's CPUs were meanwhile (all processes, lanes beside
# it included): a phase near 100% is bound by CPU, one far below it waits (on the network, disk,
# sleeps or timeouts), which says whether running something beside it could pay
timed() {
    local name=$1 t0=$EPOCHREALTIME rc=0 c0 c1
    c0=$(cpu_ticks)
    shift
    "$@" || rc=$?
    c1=$(cpu_ticks)
    local line
    line=$(awk -v a="$t0" -v b="$EPOCHREALTIME" -v n="$name" -v rc="$rc" -v c0="$c0" -v c1="$c1" \
        'BEGIN { split(c0, x, " "); split(c1, y, " "); busy = ""
                 if (y[2] > x[2]) busy = sprintf(", CPU busy %.0f%%", 100 * (y[1] - x[1]) / (y[2] - x[2]))
                 printf "== phase %s: %.1f s (exit %d%s)", n, b - a, rc, busy }')
    echo "$line"
    phase_lines+=("$line")
    return $rc
}
summary() {
    echo "== phases:"
    local line
    for line in "${phase_lines[@]}"; do echo "   ${line#== phase }"; done
    awk -v a="$t_start" -v b="$EPOCHREALTIME" 'BEGIN { printf "   total: %.1f s\n", b - a }'
}
shared_dir=""
if [ -z "${SHOPCOMP_TEST_SHARED_DIR:-}" ]; then
    shared_dir=$(mktemp -d "${TMPDIR:-/tmp}/shopcomp-test-run.XXXXXX")
    export SHOPCOMP_TEST_SHARED_DIR=$shared_dir
fi
finish() {
    summary
    if [ -n "$shared_dir" ]; then rm -rf "$shared_dir"; fi
}
trap finish EXIT
# checked before anything runs (a bad value used to surface only after the main suite)
n_lanes="${SHOPCOMP_EXTRAS_LANES:-3}"
case "$n_lanes" in
    *[!0-9]* | '') echo "SHOPCOMP_EXTRAS_LANES must be a whole number from 1, got '$n_lanes'" >&2; exit 2 ;;
esac
n_lanes=$((10#$n_lanes))  # 08 is 8, not an octal error
if [ "$n_lanes" -lt 1 ]; then echo "SHOPCOMP_EXTRAS_LANES must be a whole number from 1, got '$SHOPCOMP_EXTRAS_LANES'" >&2; exit 2; fi
export SHOPCOMP_REQUIRE_EXTRAS=1  # inside tests/extras a missing stack fails instead of skipping
# Bytecode: the suites start hundreds of Python processes (CLI subprocesses, xdist workers, Ray
# workers, llamafactory-cli, TRL); under PYTHONDONTWRITEBYTECODE=1 (set on the CI machine) each one
# compiled every module it imported again (import torch + transformers + our CLI: 5.5 CPU-s, 2.6
# from compiled files). Compiled files go to one tree outside the sources and the environments
# (.cache/pycache, SHOPCOMP_PYCACHE to move it), kept between runs; Python checks each against
# its source's size and time, so an edited module is compiled again.
unset PYTHONDONTWRITEBYTECODE
PYTHONPYCACHEPREFIX="${SHOPCOMP_PYCACHE:-$PWD/.cache/pycache}"
mkdir -p "$PYTHONPYCACHEPREFIX"
PYTHONPYCACHEPREFIX=$(cd "$PYTHONPYCACHEPREFIX" && pwd)  # absolute: processes that change directory share it
export PYTHONPYCACHEPREFIX
if [ -n "${CI:-}" ]; then
    export COLUMNS=80
fi
# A missing extra environment is installed in the background from the start, beside lint and the
# main suite (the installs mostly wait on downloads and disk; on the 2-core machine the two take
# about 4 minutes one after the other); each suite waits for its own. Log: .cache/install-<name>.log.
declare -A bg_pid bg_t0
if [ "${SHOPCOMP_SKIP_EXTRAS:-0}" != 1 ]; then
    mkdir -p .cache
    for dir in tests/extras/*/; do
        name=$(basename "$dir")
        [ "$name" = pipeline ] && continue
        if [ -f "scripts/install_$name.sh" ] && [ ! -x ".venv-$name/bin/python" ]; then
            echo "== installing .venv-$name in the background (scripts/install_$name.sh; log .cache/install-$name.log)"
            bg_t0[$name]=$EPOCHREALTIME
            bash "scripts/install_$name.sh" > ".cache/install-$name.log" 2>&1 &
            bg_pid[$name]=$!
        fi
    done
fi
# wait_install NAME: wait for NAME's background install (if one was started) and print its phase line
wait_install() {
    local name=$1 rc=0
    [ -n "${bg_pid[$name]:-}" ] || return 0
    wait "${bg_pid[$name]}" || rc=$?
    local line
    line=$(awk -v a="${bg_t0[$name]}" -v b="$EPOCHREALTIME" -v n="install .venv-$name (background)" -v rc="$rc" \
        'BEGIN { printf "== phase %s: %.1f s (exit %d)", n, b - a, rc }')
    echo "$line"
    phase_lines+=("$line")
    unset "bg_pid[$name]"
    if [ "$rc" != 0 ]; then
        echo "== installing .venv-$name failed; the end of .cache/install-$name.log:"
        tail -n 40 ".cache/install-$name.log"
    fi
    return $rc
}
# `ruff format --check` is part of the lint step (SHOPCOMP_FORMAT_CHECK=0 skips it).
FORMAT_CHECK="${SHOPCOMP_FORMAT_CHECK:-1}"
status=0
if [ "${SHOPCOMP_SKIP_LINT:-0}" != 1 ]; then
    if [ ! -x .venv/bin/ruff ]; then  # a .venv made before ruff joined the test extra
        echo "== installing the test extra into .venv (ruff; scripts/install.sh does the same)"
        timed "install test extra into .venv" .venv/bin/python -m pip install -q -c constraints.txt -e ".[test,lora]"
    fi
    echo "== ruff check"
    timed "ruff check" .venv/bin/ruff check . || status=$?
    if [ "$FORMAT_CHECK" = 1 ]; then
        echo "== ruff format --check"
        timed "ruff format --check" .venv/bin/ruff format --check . || status=$?
    fi
fi
workers=()
if [ -z "${SHOPCOMP_TEST_WORKERS:-}" ]; then
    SHOPCOMP_TEST_WORKERS=0
    if [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ]; then SHOPCOMP_TEST_WORKERS=2; fi
fi
if [ "$SHOPCOMP_TEST_WORKERS" != 0 ]; then
    workers=(-n "$SHOPCOMP_TEST_WORKERS" --dist loadfile)
fi
echo "== main suite in .venv${workers:+ (${SHOPCOMP_TEST_WORKERS} workers)}"
timed "main suite" .venv/bin/python -m pytest -q --durations=25 "${workers[@]}" "$@" || status=$?
# run_extra NAME: the suite tests/extras/NAME in its environment (.venv-NAME; pipeline: .venv, driving
# .venv-sft and .venv-rl), installing a missing environment first
run_extra() {
    local name=$1 venv=".venv-$1"
    shift
    if [ "$name" = pipeline ]; then
        echo "== tests/extras/pipeline in .venv (with .venv-sft and .venv-rl)"
        timed "tests/extras/pipeline" .venv/bin/python -m pytest -q --durations=10 tests/extras/pipeline "$@"
        return
    fi
    if [ ! -x "$venv/bin/python" ]; then
        echo "== installing $venv for tests/extras/$name (scripts/install_$name.sh)"
        timed "install $venv" bash "scripts/install_$name.sh"
    fi
    echo "== tests/extras/$name in $venv"
    timed "tests/extras/$name" "$venv/bin/python" -m pytest -q --durations=10 "tests/extras/$name" "$@"
}
# lane LOG PYTEST_ARGS...: run_extra for each suite of lane_suites in turn, the output into LOG and
# the phase lines into LOG.phases; exits non-zero when any suite failed
lane() {
    local log=$1 name rc=0
    shift
    phase_lines=()
    for name in "${lane_suites[@]}"; do run_extra "$name" "$@" || rc=$?; done >"$log" 2>&1
    printf '%s\n' "${phase_lines[@]}" >"$log.phases"
    return $rc
}
# end_lane PID LOG: wait for the lane, print its output, take its phase lines; its exit status
end_lane() {
    local rc=0 line
    wait "$1" || rc=$?
    cat "$2"
    while IFS= read -r line; do [ -z "$line" ] || phase_lines+=("$line"); done <"$2.phases"
    return $rc
}
if [ "${SHOPCOMP_SKIP_EXTRAS:-0}" != 1 ]; then
    # every environment first (the background installs end long before the main suite does)
    for dir in tests/extras/*/; do
        name=$(basename "$dir")
        [ "$name" = pipeline ] || wait_install "$name" || status=$?
    done
    # The extras suites run in lanes at once (SHOPCOMP_EXTRAS_LANES, default 3; 1: one after
    # another): tests/extras/rl (Ray clusters and Serve replicas: much of its time is spent
    # waiting) in the first lane, the others in order, split into the remaining lanes as evenly as
    # their count allows, the pipeline last (it needs .venv-sft and .venv-rl, nothing of the other
    # suites). Each lane's output is printed when the lane ends.
    suites=()
    for dir in tests/extras/*/; do
        name=$(basename "$dir")
        if [ "$name" = rl ]; then suites=("$name" "${suites[@]}"); elif [ "$name" != pipeline ]; then suites+=("$name"); fi
    done
    [ -d tests/extras/pipeline ] && suites+=(pipeline)
    if [ "$n_lanes" = 1 ] || [ "${#suites[@]}" -le 1 ]; then
        for name in "${suites[@]}"; do run_extra "$name" "$@" || status=$?; done
    else
        mkdir -p .cache
        # lanes[j]: the suites of lane j (space-separated); rl (if any) alone in the first, the
        # rest in k contiguous runs (k >= 1: n_lanes >= 2 here)
        rest=("${suites[@]}")
        lanes=()
        if [ "${suites[0]}" = rl ]; then lanes+=("rl"); rest=("${suites[@]:1}"); fi
        k=$((n_lanes - ${#lanes[@]}))
        [ "$k" -le "${#rest[@]}" ] || k=${#rest[@]}
        start=0
        for ((j = 0; j < k; j++)); do
            size=$(((${#rest[@]} - start) / (k - j)))
            lanes+=("${rest[*]:start:size}")
            start=$((start + size))
        done
        pids=() logs=() shown=()
        letters=(a b c d e f g h)
        for ((j = 0; j < ${#lanes[@]}; j++)); do
            read -r -a lane_suites <<<"${lanes[j]}"
            log=.cache/test-lane-${letters[j]:-$j}.log
            lane "$log" "$@" &
            pids+=($!)
            logs+=("$log")
            shown+=("[${lanes[j]}]")
        done
        echo "== tests/extras in ${#lanes[@]} lanes at once: ${shown[*]} (logs ${logs[*]})"
        for ((j = 0; j < ${#lanes[@]}; j++)); do end_lane "${pids[j]}" "${logs[j]}" || status=$?; done
    fi
fi
exit $status
