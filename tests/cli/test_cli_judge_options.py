"""Bad judge options are refused at once, before the catalog, index and embeddings are loaded."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from shopping_companion.cli import app


@pytest.mark.parametrize("cmd", [["eval"], ["sft", "collect"]])
@pytest.mark.parametrize(
    "opts,msg",
    [
        (["--judge", "bogus"], "judge.kind (--judge): Input should be 'rule' or 'llm'"),
        (["--judge", "llm"], "judge.model is required with judge.kind=llm (--judge-model)"),
    ],
)
def test_bad_judge_options_fail_before_loading_anything(tmp_path, cmd, opts, msg):
    extra = ["--out", str(tmp_path / "out")] if cmd[0] == "sft" else ["--name", "x"]
    r = CliRunner().invoke(app, [*cmd, "--bench", str(tmp_path / "no-bench"), *extra, *opts])
    assert r.exit_code == 2, r.output
    assert msg in r.output  # not "no-bench is not a benchmark": checked before the benchmark, catalog and index load
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("cmd", [["eval"], ["sft", "collect"]])
def test_an_llm_judge_endpoint_that_cannot_be_reached_is_named_before_loading(tmp_path, cmd):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    extra = (
        ["--out", str(tmp_path / "out")] if cmd[0] == "sft" else ["--name", "x", "--runs-dir", str(tmp_path / "runs")]
    )
    r = CliRunner().invoke(
        app,
        [
            *cmd,
            "--bench",
            str(tmp_path / "no-bench"),
            *extra,
            "--judge",
            "llm",
            "--judge-model",
            "j:x:",
            "--judge-base-url",
            f"http://127.0.0.1:{port}/v1",
        ],
    )
    assert r.exit_code == 4, r.output  # an endpoint that cannot be reached: EXIT_SERVICE
    assert "--judge-base-url" in r.output and f"cannot reach http://127.0.0.1:{port}/v1" in r.output
    assert "j:x:" in r.output  # printed as written (no emoji for ":x:")
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()
