"""scripts/serve_vllm.sh and scripts/eval_checkpoint.sh: syntax, the commands they build (--dry-run),
argument errors, and one real start → wait for /v1/models → `shopcomp eval` → stop cycle with a
stand-in for the vllm executable (tests/fake_vllm.py, serving the scripted policy over HTTP)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from shopping_companion.benchmark.report import read_results

REPO = Path(__file__).resolve().parents[2]
SERVE = REPO / "scripts" / "serve_vllm.sh"
EVAL = REPO / "scripts" / "eval_checkpoint.sh"


def run(*args, env=None, timeout=60):
    return subprocess.run(["bash", *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)


def test_scripts_parse():
    for s in (SERVE, EVAL):
        assert run("-n", s).returncode == 0


def test_serve_dry_run_builds_the_vllm_command():
    out = run(
        SERVE,
        "--model",
        "/ckpt/Qwen3-4B-Thinking-2507",
        "--lora",
        "/ad/x",
        "--port",
        "8123",
        "--dry-run",
        "--",
        "--max-num-seqs",
        "256",
    )
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    assert words[:3] == ["vllm", "serve", "/ckpt/Qwen3-4B-Thinking-2507"]
    cmd = " ".join(words)
    for part in (
        "--port 8123",
        "--served-model-name Qwen3-4B-Thinking-2507",
        "--enable-auto-tool-choice",
        "--tool-call-parser hermes",
        "--reasoning-parser qwen3",
        "--enable-lora",
        "--lora-modules Qwen3-4B-Thinking-2507-lora=/ad/x",
        "--max-lora-rank 64",
        "--max-num-seqs 256",
    ):
        assert part in cmd, part
    plain = run(SERVE, "--model", "meta/Llama-3-8B", "--dry-run").stdout
    assert "--reasoning-parser" not in plain and "--enable-lora" not in plain
    assert (
        "--reasoning-parser qwen3"
        not in run(SERVE, "--model", "qwen3-x", "--reasoning-parser", "none", "--dry-run").stdout
    )
    bad = run(SERVE, "--port", "1")
    assert bad.returncode == 2 and "--model is required" in bad.stderr
    assert run(SERVE, "--model", "m", "--bogus").returncode == 2
    assert run(SERVE, "--model", "m", "--lora", "/no/such/adapter").returncode == 2  # checked when not a dry run


def test_eval_checkpoint_dry_run():
    out = run(
        EVAL,
        "--model",
        "/ckpt/q3",
        "--bench",
        "b",
        "--name",
        "r",
        "--lora",
        "/ad",
        "--port",
        "8001",
        "--dry-run",
        "--",
        "--strategies",
        "all",
        "--trials",
        "4",
    )
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(":", 1) for line in out.stdout.strip().splitlines())
    assert "--lora-modules q3-lora=/ad" in lines["serve"] and "--port 8001" in lines["serve"]
    assert lines["wait"].strip() == "GET http://127.0.0.1:8001/v1/models (up to 900s)"
    ev = lines["eval"]
    for part in (
        "eval --bench b --name r",
        "--backend openai",
        "--base-url http://127.0.0.1:8001/v1",
        "--model q3-lora",
        "--strategies all --trials 4",
    ):
        assert part in ev, part
    missing = run(EVAL, "--model", "m", "--bench", "b")
    assert missing.returncode == 2 and "--name is required" in missing.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def bench_dir(catalog_products, sgd_sessions, product_search, tmp_path_factory):
    from shopping_companion.benchmark.synth import SynthConfig, synthesize, write_benchmark

    def searcher(q, k):
        return [h["product_id"] for h in product_search.search(q, top_k=k)]

    b = synthesize(
        catalog_products,
        sgd_sessions,
        SynthConfig(addon_share=0.0, n_tasks=2, seed=41, sessions_per_user=40),
        searcher=searcher,
    )
    return write_benchmark(b, tmp_path_factory.mktemp("scriptbench") / "bench")


@pytest.mark.slow
def test_eval_checkpoint_starts_waits_evaluates_and_stops(bench_dir, catalog_index_dir, tmp_path):
    port = _free_port()
    argv_file = tmp_path / "argv.json"
    env = dict(
        os.environ,
        VLLM_CMD=f"{sys.executable} {REPO / 'tests' / 'fake_vllm.py'}",
        FAKE_VLLM_BENCH=str(bench_dir),
        FAKE_VLLM_STARTUP_S="3",
        FAKE_VLLM_ARGV=str(argv_file),
        SHOPCOMP_CMD=f"{sys.executable} -m shopping_companion.cli",
        PYTHON=sys.executable,
    )
    out = run(
        EVAL,
        "--model",
        str(tmp_path / "Qwen3-tiny"),
        "--bench",
        bench_dir,
        "--name",
        "ck",
        "--port",
        port,
        "--runs-dir",
        tmp_path / "runs",
        "--startup-timeout",
        "120",
        "--",
        "--index-dir",
        catalog_index_dir,
        "--limit",
        "1",
        "--max-turns",
        "4",
        "--concurrency",
        "1",
        env=env,
        timeout=400,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "server ready" in out.stderr
    (res,) = read_results(tmp_path / "runs" / "ck" / "results.jsonl")
    assert res.error is None and res.policy == "openai:Qwen3-tiny"
    argv = json.loads(argv_file.read_text())
    assert argv[:2] == ["serve", str(tmp_path / "Qwen3-tiny")] and "hermes" in argv and "qwen3" in argv
    assert "fake vllm serving Qwen3-tiny" in (tmp_path / "runs" / "ck" / "vllm.log").read_text()
    assert not _port_open(port)  # the server was stopped
    # a server that dies at start-up: the script reports it and fails
    env["VLLM_CMD"] = "false"
    dead = run(
        EVAL,
        "--model",
        "m",
        "--bench",
        bench_dir,
        "--name",
        "dead",
        "--port",
        _free_port(),
        "--runs-dir",
        tmp_path / "runs",
        env=env,
        timeout=60,
    )
    assert dead.returncode == 1 and "exited before it was ready" in dead.stderr
