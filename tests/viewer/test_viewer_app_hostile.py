"""Hostile inputs to the web app of ``shopcomp view`` and its static export (issue 18's break test):
foreign ``Host`` headers (DNS rebinding), JSON nested too deeply for Python's recursion limit,
bidirectional controls and NUL in names and echoed query values, and export directories inside
the run or reached through symlinks.

Real run files and a real :class:`RunCatalog` under ``tmp_path``; pages through Starlette's
TestClient over :func:`create_app`; nothing of ours is mocked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from shopping_companion.errors import ConfigError
from shopping_companion.types import EpisodeResult
from shopping_companion.viewer.app import TOO_DEEP, Clipper, _show, create_app, result_items, visible
from shopping_companion.viewer.export import MARKER, export_run
from shopping_companion.viewer.web import LOCAL_HOST_NAMES, allowed_hosts_for
from shopping_companion.viewer.store import RunCatalog
from tests.viewer.test_viewer_app import LOCAL, hostile_episode, local_client, make_task, write_run

DEPTH = 100_000  # far past any recursion limit: json.loads / json.dumps raise RecursionError at any stack depth
DEEP_TEXT = "[" * DEPTH + "]" * DEPTH


def deep_episode(task_id: str) -> EpisodeResult:
    """:func:`hostile_episode` with its stage-1 ``mem_search`` result holding ``DEEP_TEXT`` under
    ``results`` and its stage-2 ``product_view`` result being ``DEEP_TEXT``."""
    episode = hostile_episode(task_id, big=300)
    episode.stages[0].trajectory.steps[0].tool_results[0].content = '{"results": ' + DEEP_TEXT + "}"
    episode.stages[1].trajectory.steps[0].tool_results[0].content = DEEP_TEXT
    return episode


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    write_run(root / "deep", [deep_episode("t-deep")], [make_task("t-deep", "find a shirt")])
    bidi = "\u202eevil\u2066x\u2069"
    write_run(root / f"name{bidi}", [deep_episode(f"task{bidi}")], [make_task(f"task{bidi}", f"instruction {bidi}")])
    return root


@pytest.fixture
def client(runs: Path) -> TestClient:
    return local_client(create_app(RunCatalog([runs])), raise_server_exceptions=True)


# --------------------------------------------------------------------------- Host header (DNS rebinding)


@pytest.mark.parametrize("host", ["127.0.0.1:8765", "localhost:8765", "[::1]:8765", "127.0.0.1", "LOCALHOST"])
def test_local_host_headers_are_answered(client: TestClient, host: str):
    assert client.get("/", headers={"host": host}).status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "127.0.0.1.evil.example", "10.0.0.5"])
def test_foreign_host_headers_are_refused(client: TestClient, host: str):
    r = client.get("/runs/deep/episodes", headers={"host": host})
    assert r.status_code == 400 and r.text == "Invalid host header"
    assert "script-src 'self'" in r.headers["content-security-policy"]  # the guard wraps the refusal too
    assert client.get("/api/runs/deep/rows", headers={"host": host}).status_code == 400


def test_allowed_hosts_follow_the_bind_address(runs: Path):
    assert allowed_hosts_for("127.0.0.1") == list(LOCAL_HOST_NAMES)
    assert allowed_hosts_for("::1") == list(LOCAL_HOST_NAMES)
    assert allowed_hosts_for("0.0.0.0") == ["*"] and allowed_hosts_for("::") == ["*"]
    assert allowed_hosts_for("fe80::1") == [*LOCAL_HOST_NAMES, "[fe80::1]"]
    app = create_app(RunCatalog([runs]), allowed_hosts=allowed_hosts_for("Node7.Cluster"))
    c = TestClient(app, base_url=LOCAL)
    assert c.get("/", headers={"host": "node7.cluster:8765"}).status_code == 200
    assert c.get("/", headers={"host": "evil.example"}).status_code == 400
    anyhost = TestClient(create_app(RunCatalog([runs]), allowed_hosts=allowed_hosts_for("0.0.0.0")))
    assert anyhost.get("/", headers={"host": "whatever.example"}).status_code == 200


# --------------------------------------------------------------------------- JSON nested too deeply


def test_deep_json_tool_results_show_as_text(client: TestClient):
    r = client.get("/runs/deep/episodes/1")
    assert r.status_code == 200
    assert "Could not show" not in r.text  # no section lost to a RecursionError
    assert 'id="stage-1"' in r.text and 'id="s1-t0"' in r.text and 'id="s2-t0"' in r.text  # both stages rendered
    assert "[[[[[[[[" in r.text  # the raw text, cut to the cap
    content = client.get("/runs/deep/episodes/1/content?stage=2&turn=0&call=0")
    assert content.status_code == 200 and content.text == DEEP_TEXT


def test_deep_values_never_raise():
    deep: list = []
    for _ in range(DEPTH):  # built without recursion
        deep = [deep]
    clip = Clipper().clip(deep, as_json=True)
    assert clip.text == TOO_DEEP and not clip.pretty
    assert Clipper().clip(DEEP_TEXT, as_json=True).text == DEEP_TEXT[:20_000]
    assert visible(deep) == TOO_DEEP
    assert _show({"a": deep}) == TOO_DEEP
    mem = type("Call", (), {"name": "mem_search", "content": '{"results": ' + DEEP_TEXT + "}", "returned": []})()
    assert result_items(mem) is None  # not a table: the page shows the text


# --------------------------------------------------------------------------- controls in names and echoed values


def test_bidi_controls_in_names_render_visibly(client: TestClient):
    home = client.get("/")
    assert home.status_code == 200
    assert "name\u27e8U+202E\u27e9evil\u27e8U+2066\u27e9x\u27e8U+2069\u27e9" in home.text
    assert not any(c in home.text for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    rows_url = next(href for href in re.findall(r'href="([^"]+)"', home.text) if href.startswith("/runs/name"))
    page = client.get(rows_url)
    assert page.status_code == 200
    assert "task\u27e8U+202E\u27e9evil" in page.text and "\u202e" not in page.text
    episode = client.get(rows_url + "/1")
    assert episode.status_code == 200 and "\u202e" not in episode.text and "\u2066" not in episode.text
    assert "instruction \u27e8U+202E\u27e9evil" in episode.text


@pytest.mark.parametrize(
    ("q", "shown"), [("\x00", "\u2400"), ("a\u202eb", "a\u27e8U+202E\u27e9b"), ("\x1b[31m", "\u241b[31m")]
)
def test_echoed_search_text_is_visible(client: TestClient, q: str, shown: str):
    r = client.get("/runs/deep/episodes", params={"q": q})
    assert r.status_code == 200
    assert f'name="q" value="{shown}"' in r.text
    assert q not in r.text


# --------------------------------------------------------------------------- export placement and symlinks


def test_export_refuses_a_directory_inside_the_run(runs: Path):
    run_dir = runs / "deep"
    before = sorted(p.name for p in run_dir.rglob("*"))
    for out in (run_dir, run_dir / "bundle", run_dir / "bench" / "x"):
        with pytest.raises(ConfigError, match="inside the run's directory"):
            export_run(RunCatalog([run_dir]), "deep", out)
    assert sorted(p.name for p in run_dir.rglob("*")) == before  # nothing was written


def test_export_refuses_a_directory_symlinked_into_the_run(runs: Path, tmp_path: Path):
    link = tmp_path / "link-to-run"
    link.symlink_to(runs / "deep", target_is_directory=True)
    with pytest.raises(ConfigError, match="inside the run's directory"):
        export_run(RunCatalog([runs / "deep"]), "deep", link / "out")
    assert not (runs / "deep" / "out").exists()


@pytest.mark.parametrize("entry", ["episodes", "static", "index.html", MARKER, "episodes/1.html", "static/viewer.js"])
def test_export_never_writes_through_a_symlink(runs: Path, tmp_path: Path, entry: str):
    out = tmp_path / "bundle"
    export_run(RunCatalog([runs / "deep"]), "deep", out)  # a real previous export
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    target = out / entry
    is_dir = target.is_dir()
    if is_dir:
        for f in target.iterdir():
            f.unlink()
        target.rmdir()
        target.symlink_to(victim, target_is_directory=True)
    else:
        target.unlink()
        target.symlink_to(victim / "keep.txt")
    with pytest.raises(ConfigError, match="symlink"):
        export_run(RunCatalog([runs / "deep"]), "deep", out)
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert (victim / "keep.txt").read_text() == "keep"
    assert target.is_symlink()  # refused before anything was removed or written


# --------------------------------------------------------------------------- a run file that cannot be read


def test_unreadable_run_file_is_an_in_page_error_never_a_500(runs: Path):
    """results.jsonl replaced by a directory after discovery (what chmod 000 does for a non-root
    user: the open fails): every page says so in an error box, the rows API answers 503."""
    client = local_client(create_app(RunCatalog([runs])), raise_server_exceptions=True)
    assert client.get("/runs/deep/episodes/1").status_code == 200
    results = runs / "deep" / "results.jsonl"
    results.unlink()
    results.mkdir()
    home = client.get("/")
    assert home.status_code == 200 and "cannot read:" in home.text and "a directory" in home.text
    episodes = client.get("/runs/deep/episodes")
    assert episodes.status_code == 200 and "Cannot read the run file:" in episodes.text
    for url in (
        "/runs/deep/episodes/1",
        "/runs/deep/episodes/1/raw",
        "/runs/deep/episodes/1/content?stage=2&turn=0&call=0",
        "/compare/episode?a=deep&la=1&b=deep&lb=1",
    ):
        r = client.get(url)
        assert r.status_code == 200, url
        assert "Cannot read the run file" in r.text and "results.jsonl" in r.text and "a directory" in r.text, url
        assert "Internal error" not in r.text
    api = client.get("/api/runs/deep/rows?after=0")
    assert api.status_code == 503 and "a directory" in api.json()["error"]


# --------------------------------------------------------------------------- a new user's re-check


def test_invisible_marks_that_reorder_or_clone_ids_render_visibly():
    """RLM, ALM, zero-width space, line separator and BOM make two ids look alike or reorder them:
    they are shown as code points; the zero-width joiner (emoji sequences) is kept."""
    for c in ("\u200f", "\u061c", "\u200b", "\u2028", "\ufeff"):
        shown = visible(f"sc-0{c}-00003")
        assert c not in shown and f"U+{ord(c):04X}" in shown
    assert visible("\U0001f469\u200d\U0001f4bb") == "\U0001f469\u200d\U0001f4bb"


def test_one_pair_is_never_marked_significant_and_the_picker_tells_runs_apart(tmp_path: Path):
    """Two runs with one paired episode: the deltas show no interval and no highlight; two runs
    of the same name are told apart by their ids in the picker and the heading."""
    task = make_task("t-one", "find a shirt")
    a = hostile_episode("t-one", big=10)
    b = a.model_copy(deep=True)
    b.stages[1].reward.total += 1.0
    write_run(tmp_path / "x" / "quickstart", [a], [task])
    write_run(tmp_path / "y" / "quickstart", [b], [task])
    client = local_client(create_app(RunCatalog([tmp_path / "x" / "quickstart", tmp_path / "y" / "quickstart"])))
    ids = [s.run_id for s in RunCatalog([tmp_path / "x" / "quickstart", tmp_path / "y" / "quickstart"]).runs()]
    assert ids == ["quickstart", "quickstart-2"]
    html = client.get("/compare", params={"a": ids[0], "b": ids[1]}).text
    assert "– (one pair)" in html and "CI excludes 0" not in html
    assert ">quickstart-2 · " in html and "B = <a" in html and ">quickstart-2</a>" in html


def test_the_benchmark_tooltip_names_the_directory_actually_read(tmp_path: Path):
    """A run's config may name its benchmark relatively; the runs page shows where the tasks were
    really read from (absolute), or that none was found."""
    write_run(tmp_path / "runs" / "one", [hostile_episode("t1", big=10)], [make_task("t1", "find a shirt")])
    (tmp_path / "runs" / "lost").mkdir()
    (tmp_path / "runs" / "lost" / "results.jsonl").write_text(hostile_episode("t9", big=10).model_dump_json() + "\n")
    html = local_client(create_app(RunCatalog([tmp_path / "runs"]))).get("/").text
    used = (tmp_path / "runs" / "one" / "bench").resolve()
    assert f'title="read from {used}"' in html
    assert 'title="not found: ' in html


def test_a_huge_bad_line_says_how_long_it_really_is(tmp_path: Path):
    """A foreign line far over the store's read cap: the page states its stored size, not only the
    capped text's length, and the raw route serves all of it."""
    bad = '{"task_id": "t-big", "stages": "' + "x" * 1_000_000 + '"}'
    write_run(tmp_path / "runs" / "big", [], [make_task("t-big", "find a shirt")], extra_lines=[bad + "\n"])
    client = local_client(create_app(RunCatalog([tmp_path / "runs"])))
    page = client.get("/runs/big/episodes/1")
    assert page.status_code == 200
    assert f"The stored line is {len(bad):,} bytes" in page.text
    assert len(client.get("/runs/big/episodes/1/raw").content) == len(bad)
