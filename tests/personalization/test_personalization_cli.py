"""`personalize build|run|eval` end to end on real review files with the MiniLM embedder, the
extractive role engine, and the trajectory judge behind a local OpenAI-compatible server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from shopping_companion.cli.personalize import app

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402

CONFIG = """
build:
  seed: 0
  max_reviews_per_item: 2
  selection: {users_per_category: 2}
  sources:
    - {kind: multicategory, path: reviews/amazon2023_multicategory_user_histories.jsonl.gz, categories: [Video_Games]}
run:
  k_d: 1
  k_p: 5
  k_r: 5
"""


def test_build_run_eval_end_to_end(tmp_path, data_dir, embedder):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    ds, run = tmp_path / "ds", tmp_path / "run"
    r = CliRunner()
    res = r.invoke(app, ["build", "--out", str(ds), "--config", str(cfg), "--data-dir", str(data_dir)])
    assert res.exit_code == 0, res.output
    man = json.loads((ds / "manifest.json").read_text())
    assert man["n_cases"] == 2 and man["categories"]["Video_Games"]["trajectories"] == 2
    assert man["profile_builder"] == "rule" and man["query_generator"] == "template"
    res = r.invoke(app, ["run", "--dataset", str(ds), "--out", str(run), "--config", str(cfg), "--memory", "all"])
    assert res.exit_code == 0, res.output
    lines = (run / "dialogues.jsonl").read_text().splitlines()
    assert len(lines) == 2 * (4 + 4)  # 4 variants with full memory + Full under 4 memory modes
    # resume: nothing left to do, nothing appended
    res = r.invoke(app, ["run", "--dataset", str(ds), "--out", str(run), "--config", str(cfg), "--memory", "all"])
    assert res.exit_code == 0 and len((run / "dialogues.jsonl").read_text().splitlines()) == len(lines)
    # the resolved config is written beside the dialogues and resumes the run as it is
    saved = (run / "config.yaml").read_text()
    assert "k_p: 5" in saved and "memory:" in saved and str(ds) in saved
    res = r.invoke(app, ["run", "--config", str(run / "config.yaml")])
    assert res.exit_code == 0 and len((run / "dialogues.jsonl").read_text().splitlines()) == len(lines), res.output
    # --set: a bad key names the allowed ones; a changed value is another run, refused as a resume
    res = r.invoke(app, ["run", "--dataset", str(ds), "--out", str(run), "--config", str(cfg), "--set", "k_q=2"])
    assert res.exit_code == 2 and "k_q: unknown field" in res.output and "k_d, k_p, k_r" in res.output, res.output
    res = r.invoke(app, ["run", "--config", str(run / "config.yaml"), "--set", "k_p=3"])
    assert res.exit_code == 2 and "different run configuration" in res.output and "k_p: 5 → 3" in res.output, res.output
    assert (run / "config.yaml").read_text() == saved  # the record of what ran is kept
    res = r.invoke(app, ["run", "--dataset", str(ds)])
    assert res.exit_code == 2 and "out (--out): required" in res.output, res.output
    # kill -9 mid-write leaves half a line: the rerun cuts it off and redoes that dialogue, nothing
    # is glued to the fragment (regression: the redone record was appended to the torn line and lost)
    raw = (run / "dialogues.jsonl").read_bytes()
    last = raw.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    (run / "dialogues.jsonl").write_bytes(raw[: len(raw) - len(last) - 1] + last[: len(last) // 2])
    res = r.invoke(app, ["run", "--dataset", str(ds), "--out", str(run), "--config", str(cfg), "--memory", "all"])
    assert res.exit_code == 0, res.output
    healed = (run / "dialogues.jsonl").read_text().splitlines()
    assert len(healed) == len(lines) and all(json.loads(line) for line in healed)
    assert {(d["case_id"], d["variant"], d["memory"]) for d in map(json.loads, healed)} == {
        (d["case_id"], d["variant"], d["memory"]) for d in map(json.loads, lines)
    }
    # missing inputs are named errors, not tracebacks, and create nothing
    res = r.invoke(app, ["run", "--dataset", str(tmp_path / "nope"), "--out", str(tmp_path / "r3")])
    assert res.exit_code == 2 and "dataset" in res.output and "cases.jsonl" in res.output
    assert not (tmp_path / "r3").exists()
    res = r.invoke(app, ["eval", "--run", str(tmp_path / "nope"), "--dataset", str(ds)])
    assert res.exit_code == 2 and "dialogues.jsonl" in res.output
    res = r.invoke(app, ["run", "--dataset", str(ds), "--out", str(tmp_path / "r4"), "--categories", "Nope"])
    assert res.exit_code == 2 and "categories" in res.output and "Video_Games" in res.output
    assert not (tmp_path / "r4").exists()
    res = r.invoke(app, ["eval", "--run", str(run), "--dataset", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "dataset" in res.output
    # a different identity is refused
    with ScriptedOpenAIServer([]) as srv:  # a reachable endpoint: the identity check is what refuses
        res = r.invoke(
            app,
            [
                "run",
                "--dataset",
                str(ds),
                "--out",
                str(run),
                "--roles",
                "llm",
                "--model",
                "x",
                "--base-url",
                srv.base_url,
            ],
        )
    assert res.exit_code == 2 and "different run configuration" in res.output and "engine" in res.output
    # an endpoint that does not answer is named at once (no minutes of per-request retries): exit 4
    res = r.invoke(
        app,
        [
            "run",
            "--dataset",
            str(ds),
            "--out",
            str(tmp_path / "r5"),
            "--roles",
            "llm",
            "--model",
            "x",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
    )
    assert res.exit_code == 4 and "--base-url" in res.output and "cannot reach http://127.0.0.1:9/v1" in res.output
    res = r.invoke(app, ["run", "--dataset", str(ds), "--out", str(tmp_path / "r6"), "--roles", "llm"])
    assert res.exit_code == 2 and "model is required with roles=llm" in res.output, res.output
    res = r.invoke(app, ["run", "--dataset", str(ds), "--out", str(tmp_path / "r2"), "--variants", "fancy"])
    assert res.exit_code == 2 and "variants" in res.output

    res = r.invoke(app, ["eval", "--run", str(run), "--dataset", str(ds)])
    assert res.exit_code == 0, res.output
    md = (run / "report.md").read_text()
    assert "extractive rule-based baseline (not a language model)" in md
    assert "Not run: the trajectory judge needs" in md
    assert "| full | 4.00 |" in md and "| baseline | 1.00 |" in md  # role calls per turn (Table 7)
    assert (run / "retrieval.png").stat().st_size > 1000
    df = pd.read_parquet(run / "dialogues.parquet")
    assert len(df) == 16 and set(df["variant"]) == {"baseline", "textrag", "norev", "single", "full"}

    scores = iter([4, 5, 3, 2] * 100)

    def judge(body):
        return json.dumps({"gpc": next(scores), "cis": 4, "it": 3, "tc": 5, "reasons": "fine"})

    with ScriptedOpenAIServer(judge) as srv:
        res = r.invoke(
            app,
            [
                "eval",
                "--run",
                str(run),
                "--dataset",
                str(ds),
                "--judge-model",
                "judge-a",
                "--judge-base-url",
                srv.base_url,
                "--concurrency",
                "1",
            ],
        )
        assert res.exit_code == 0, res.output
        dl = [json.loads(line) for line in lines]
        distinct = {(d["case_id"], tuple((t["query"], t["reply"]) for t in d["turns"])) for d in dl}
        assert len(srv.bodies) == len(distinct)  # identical transcripts are judged once (reply cache)
    md = (run / "report.md").read_text()
    assert "Automatic evaluation (Table 3 shape)" in md and "Not run" not in md.split("## Retrieval")[0]
    assert "| CIS | 4.00 | 4.00 |" in md
    assert "Paired comparisons" in md and "full vs single" in md
    j = [json.loads(line) for line in (run / "judgments_judge-a.jsonl").read_text().splitlines()]
    assert len(j) == 16 and all(x["error"] is None and 1 <= x["gpc"] <= 5 for x in j)
    # every dialogue judged already: the report is rebuilt although the endpoint is gone now
    res = r.invoke(
        app,
        [
            "eval",
            "--run",
            str(run),
            "--dataset",
            str(ds),
            "--judge-model",
            "judge-a",
            "--judge-base-url",
            "http://127.0.0.1:9/v1",
        ],
    )
    assert res.exit_code == 0, res.output
    # work left and an endpoint that cannot be reached: named at once
    res = r.invoke(
        app,
        [
            "eval",
            "--run",
            str(run),
            "--dataset",
            str(ds),
            "--judge-model",
            "judge-new",
            "--judge-base-url",
            "http://127.0.0.1:9/v1",
        ],
    )
    assert res.exit_code == 4 and "--judge-base-url" in res.output and "cannot reach" in res.output, res.output
    res = r.invoke(
        app,
        [
            "eval",
            "--run",
            str(run),
            "--dataset",
            str(ds),
            "--second-judge-model",
            "judge-b",
            "--second-judge-base-url",
            "http://127.0.0.1:9/v1",
        ],
    )
    assert res.exit_code == 4 and "--second-judge-base-url" in res.output, res.output

    # a judge whose every call fails is an error naming it, not a report full of dashes (regression)
    with ScriptedOpenAIServer(lambda body: "not json") as broken:
        res = r.invoke(
            app,
            [
                "eval",
                "--run",
                str(run),
                "--dataset",
                str(ds),
                "--judge-model",
                "judge-broken",
                "--judge-base-url",
                broken.base_url,
                "--concurrency",
                "4",
            ],
        )
    assert res.exit_code == 4 and "judge-broken" in res.output and "judgments failed" in res.output, res.output
