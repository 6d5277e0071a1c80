"""Live refresh of the runs page and the episodes page's summary strip: the ``/api/runs`` answer
and the rows API's summary follow a run file as episodes are appended, and the pages mark the
cells the script updates (the browser test, tests/viewer/test_viewer_browser.py, watches the
numbers change on screen)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from starlette.testclient import TestClient

from benchmarks.viewer_synth import write_synthetic_run
from shopping_companion.viewer.app import create_app
from shopping_companion.viewer.store import RunCatalog


def _growing_run(tmp_path: Path) -> tuple[Path, list[str]]:
    """``runs/grow`` with the first 2 of 6 synthetic episode lines; returns it and all 6 lines."""
    src = tmp_path / "src"
    write_synthetic_run(src, 6, seed=3, turns=2, result_chars=200, trials=2)
    lines = (src / "results.jsonl").read_text().splitlines(keepends=True)
    run = tmp_path / "runs" / "grow"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text((src / "config.yaml").read_text())
    (run / "results.jsonl").write_text("".join(lines[:2]))
    return run, lines


def test_runs_api_and_rows_summary_follow_appended_episodes(tmp_path):
    run, lines = _growing_run(tmp_path)
    with TestClient(create_app(RunCatalog([run.parent])), base_url="http://127.0.0.1") as c:
        html = c.get("/").text
        cfg = json.loads(re.search(r'id="runs-live-config">([^<]*)<', html).group(1))
        assert cfg == {"live": True, "runs_url": "/api/runs"}
        assert 'data-run="grow"' in html
        for field in ("n_episodes", "acc", "succ", "n_scored", "n_errors", "pass_hat_k.1", "updated"):
            assert f'data-live-field="{field}"' in html
        before = c.get("/api/runs").json()
        assert before["live"] is True and [s["run_id"] for s in before["runs"]] == ["grow"]
        assert before["runs"][0]["n_episodes"] == 2
        with open(run / "results.jsonl", "a") as f:
            f.write("".join(lines[2:]))
        after = c.get("/api/runs").json()["runs"][0]
        assert after["n_episodes"] == 6 and after["n_lines"] == 6
        expected = RunCatalog([run.parent]).get("grow").summary
        assert (after["acc"], after["succ"]) == (expected.acc, expected.succ)
        assert after["pass_hat_k"] == {str(k): v for k, v in expected.pass_hat_k.items()}
        # the episodes page marks its strip for the script; the rows API carries the new summary
        page = c.get("/runs/grow/episodes").text
        for field in ("n_lines", "n_episodes", "n_scored", "n_errors", "n_unreadable", "acc", "succ"):
            assert f'data-live-field="{field}"' in page
        rows = c.get("/api/runs/grow/rows?after=2").json()
        assert [r["line"] for r in rows["rows"]] == [3, 4, 5, 6] and rows["summary"]["n_episodes"] == 6


def test_a_finished_run_does_not_poll(tmp_path):
    run, _ = _growing_run(tmp_path)
    (run / "summary.json").write_text("{}")  # written after the results: the run has finished
    with TestClient(create_app(RunCatalog([run.parent])), base_url="http://127.0.0.1") as c:
        html = c.get("/").text
        assert json.loads(re.search(r'id="runs-live-config">([^<]*)<', html).group(1))["live"] is False
        assert c.get("/api/runs").json()["live"] is False
        assert c.post("/api/runs").status_code == 405
