"""The web app of ``shopcomp view`` (viewer/app.py), its static export (viewer/export.py) and the
``view`` command's checks, over run directories built here from the real pydantic types.

Pages are fetched through Starlette's TestClient over :func:`create_app` and a real
:class:`RunCatalog`: nothing of ours is mocked. The hostile run holds ``<script>`` in every text
field, a 5 MB tool result, RTL overrides and control characters, a line that is a JSON array, an
unreadable line and a torn last line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from benchmarks.viewer_synth import write_synthetic_run
from shopping_companion.cli.root import app as cli_app
from shopping_companion.cli.view import is_local_host
from shopping_companion.errors import ConfigError
from shopping_companion.types import (
    EpisodeResult,
    FormatFlags,
    Message,
    Preference,
    ProductSlot,
    RewardBreakdown,
    SessionRef,
    StageResult,
    Step,
    Task,
    ToolCall,
    ToolResult,
    Trajectory,
    Verdict,
)
from shopping_companion.viewer.app import Pages, create_app
from shopping_companion.viewer.export import MARKER, export_run
from shopping_companion.viewer.links import ServerLinks
from shopping_companion.viewer.store import RunCatalog

XSS = "<script>alert(1)</script>"
RTL = "\u202eevil\u202c \u05e9\u05dc\u05d5\u05dd"  # RTL override + Hebrew
CTRL = "bell\x07 esc\x1b[31m red"
BIG = 5_000_000

# --------------------------------------------------------------------------- builders


def make_task(task_id: str, instruction: str) -> Task:
    """A single-product task with one needle session and two gold preferences."""
    return Task(
        task_id=task_id,
        instruction=instruction,
        user_id="u1",
        history=[SessionRef(session_id="s1", date="2024-01-01"), SessionRef(session_id="s2", date="2024-01-02")],
        needle_session_ids=["s1"],
        preferences=[Preference(attribute="colour", value="navy"), Preference(attribute="material", value=XSS)],
        slots=[ProductSlot(product_type="shirt", reference_product_id="p1")],
    )


def call(name: str, args: dict, content: str, ids: list[str], cid: str, error: str | None = None):
    return ToolCall(name=name, arguments=args, call_id=cid), ToolResult(
        call_id=cid, name=name, content=content, returned_ids=ids, error=error
    )


def step(text: str, *calls, errors: tuple[str, ...] = ()) -> Step:
    fmt = FormatFlags(think_ok=not errors, errors=list(errors))
    return Step(
        assistant_text=text,
        tool_calls=[c for c, _ in calls],
        tool_results=[r for _, r in calls],
        format=fmt,
        prompt_tokens=100,
        completion_tokens=20,
    )


def hostile_episode(task_id: str, *, big: int = BIG) -> EpisodeResult:
    """Two stages whose every text carries ``XSS``; stage 2's product_view result is ``big`` chars."""
    s1_steps = [
        step(
            f"<think>thinking {XSS} {RTL}</think>looking {XSS} {CTRL}",
            call(
                "mem_search",
                {"query": XSS},
                json.dumps({"results": [{"session_id": "s1", "snippet": XSS}]}),
                ["s1"],
                "c1",
            ),
            errors=(f"unbalanced think tag {XSS}",),
        ),
        step(f"<answer>colour=navy {XSS}</answer>"),
    ]
    product = {"product_id": "p1", "title": f"Shirt {XSS}", "shop_id": "s", "price": 10, "attributes": {"colour": XSS}}
    huge = json.dumps({"products": [product], "pad": ("x" * 1000 + XSS) * (big // 1026)})
    s2_steps = [
        step(f"<think>{XSS}</think>", call("product_view", {"product_ids": ["p1", XSS]}, huge, ["p1", "p9"], "c2")),
        step(f"<answer>@REC::p1@ {XSS}</answer>"),
    ]
    v1 = Verdict(judge="rule", stage=1, F=2, N=1, q1=1, m1=1, h1=1, matched=["colour=navy"], reasons=[XSS])
    v2 = Verdict(judge="rule", stage=2, F=2, N=1, p2=1, q2=1, m2=1, n2=0, success=False, reasons=[f"lacks {XSS}"])

    def traj(stage, steps, **kw):
        msgs = [Message(role="system", content=XSS), Message(role="user", content=XSS)]
        return Trajectory(task_id=task_id, stage=stage, messages=msgs, steps=steps, termination="answered", **kw)

    reward = RewardBreakdown(total=0.5, components={"R_z": 0.5, "R_tool": 1.0, "R_fmt": 0.5}, per_tool_call=[1.0])
    return EpisodeResult(
        task_id=task_id,
        task_type="single",
        mode="two_stage",
        policy=XSS,
        stages=[
            StageResult(
                trajectory=traj(1, s1_steps, identified_preferences=[Preference(attribute="colour", value=XSS)]),
                verdict=v1,
                reward=reward,
            ),
            StageResult(
                trajectory=traj(2, s2_steps, recommended_ids=["p1"], final_answer=XSS), verdict=v2, reward=reward
            ),
        ],
        acc=0.5,
        succ=False,
        wall_s=1.0,
        simulator={"name": "scripted", "feedback": f"feedback {XSS}"},
    )


def write_run(run_dir: Path, episodes: list[EpisodeResult], tasks: list[Task], *, extra_lines: list[str] = ()) -> Path:
    """``run_dir/results.jsonl`` (episodes, then ``extra_lines`` as given: the last one may lack
    its newline) and its benchmark in ``run_dir/bench`` (found by the store's fallback)."""
    (run_dir / "bench").mkdir(parents=True, exist_ok=True)
    (run_dir / "bench" / "tasks.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    body = "".join(e.model_dump_json() + "\n" for e in episodes) + "".join(extra_lines)
    (run_dir / "results.jsonl").write_text(body, encoding="utf-8")
    return run_dir / "results.jsonl"


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    """``runs/hostile`` (2 hostile episodes, a JSON array line, an unreadable line, a torn line)
    and ``runs/a``, ``runs/b`` (small synthetic runs on the same benchmark, for compare)."""
    root = tmp_path / "runs"
    tid = f"t1-{XSS}"
    write_run(
        root / "hostile",
        [hostile_episode(tid), hostile_episode("t2", big=3000)],
        [make_task(tid, f"Find a shirt {XSS} {RTL}"), make_task("t2", "plain")],
        extra_lines=["[1, 2, 3]\n", f"{{not json {XSS}\n", '{"task_id": "torn' + XSS],
    )
    bench = tmp_path / "bench-ab"
    write_synthetic_run(root / "a", 12, seed=0, bench_dir=bench, turns=3, result_chars=300)
    write_synthetic_run(root / "b", 12, seed=1, bench_dir=bench, turns=3, result_chars=300)
    return root


#: The origin TestClient requests name (``Host: 127.0.0.1:8765``): a local one the app answers.
LOCAL = "http://127.0.0.1:8765"


def local_client(app, **kw) -> TestClient:
    """A TestClient whose requests carry a local ``Host`` (the app refuses others)."""
    return TestClient(app, base_url=LOCAL, **kw)


@pytest.fixture
def client(runs_dir: Path) -> TestClient:
    return local_client(create_app(RunCatalog([runs_dir])), raise_server_exceptions=True)


def assert_safe(html: str) -> None:
    assert "<script>alert" not in html
    # the only script element is the static one; data blocks are application/json
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert 'src="/static/viewer.js"' in tag or 'type="application/json"' in tag, tag


def line_of(client: TestClient, run: str, status: str) -> int:
    rows = client.get(f"/api/runs/{run}/rows?after=0").json()["rows"]
    return next(r["line"] for r in rows if r["status"] == status)


# --------------------------------------------------------------------------- pages


def test_runs_page_lists_runs_with_security_headers(client: TestClient):
    r = client.get("/")
    assert r.status_code == 200
    for name in ("hostile", "synthetic-policy", 'href="/runs/a/episodes"', 'class="sortable"'):
        assert name in r.text
    assert "default-src 'self'" in r.headers["content-security-policy"]
    assert "'unsafe-inline'" not in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert_safe(r.text)
    assert client.get("/healthz").json() == {"ok": True}


def test_episodes_page_badges_filters_and_paging(client: TestClient):
    r = client.get("/runs/hostile/episodes")
    assert r.status_code == 200
    assert_safe(r.text)
    for badge in ("badge ok", "badge foreign", "badge unreadable", "badge torn"):
        assert badge in r.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text
    paged = client.get("/runs/a/episodes?per_page=5&page=2&sort=acc&desc=1")
    assert paged.status_code == 200
    assert paged.text.count("<tr data-line=") == 5
    assert 'href="/runs/a/episodes?page=3&amp;sort=acc&amp;desc=1&amp;per_page=5"' in paged.text
    failed = client.get("/runs/a/episodes?failed=1")
    assert failed.status_code == 200 and "badge success" not in failed.text
    assert "badge fail" in failed.text
    q = client.get("/runs/hostile/episodes?q=T2")
    assert q.text.count("<tr data-line=") == 1


def test_hostile_episode_page_is_escaped_capped_and_complete(client: TestClient):
    r = client.get("/runs/hostile/episodes/1")
    assert r.status_code == 200
    assert_safe(r.text)
    assert len(r.content) < 1_000_000  # the 5 MB tool result is cut to RESULT_CAP characters
    assert "characters cut here" in r.text
    assert 'href="/runs/hostile/episodes/1/content?stage=2&amp;turn=0&amp;call=0"' in r.text
    assert "\u241b[31m" in r.text and "\x1b" not in r.text  # ESC shown as its control picture
    assert "\u27e8U+202E\u27e9evil" in r.text and "\u202e" not in r.text  # RTL override shown, not applied
    for part in ('id="summary"', "preference", "Gold preferences", "Stage 2", "r(u) = 1.000", "fmt-error"):
        assert part in r.text, part
    assert "mark-needle" in r.text and "mark-reference" in r.text
    assert "format error" in r.text and "User simulator" in r.text
    full = client.get("/runs/hostile/episodes/1/content?stage=2&turn=0&call=0")
    assert full.status_code == 200 and len(full.text) > BIG - 10_000
    assert full.headers["content-type"].startswith("text/plain")
    assert full.headers["x-content-type-options"] == "nosniff"
    raw = client.get("/runs/hostile/episodes/1/raw")
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize("status", ["foreign", "unreadable", "torn"])
def test_bad_lines_render_raw_and_escaped(client: TestClient, status: str):
    rows = client.get("/runs/hostile/episodes?status=" + status)
    assert rows.status_code == 200
    line = int(re.search(r'<tr data-line="(\d+)"', rows.text).group(1))
    r = client.get(f"/runs/hostile/episodes/{line}")
    assert r.status_code == 200
    assert_safe(r.text)
    assert "Raw line" in r.text and f"badge {status}" in r.text


def test_broken_section_shows_an_error_box_not_a_500(client: TestClient, runs_dir: Path):
    catalog = RunCatalog([runs_dir])
    view = catalog.get("hostile").episode(2)
    view.stages[0].verdict = {"not": "a verdict"}  # malformed: the template cannot read its fields
    html = Pages().episode(ServerLinks(), catalog.get("hostile").summary, view)
    assert "Could not show stage 1" in html
    assert "Stage 2" in html and "Gold preferences" in html


def test_compare_pages(client: TestClient):
    assert client.get("/compare").status_code == 200
    r = client.get("/compare?a=a&b=b")
    assert r.status_code == 200
    for part in ("Metric deltas", "95% CI", "won", "lost", "neither", "/compare/episode?a=a&amp;la="):
        assert part in r.text, part
    link = re.search(r'href="(/compare/episode\?[^"]+)"', r.text).group(1).replace("&amp;", "&")
    side = client.get(link)
    assert side.status_code == 200 and side.text.count('id="summary"') == 2
    bad = client.get("/compare?a=nope&b=b")
    assert bad.status_code == 400 and "&#39;a&#39;" in bad.text


# --------------------------------------------------------------------------- errors and safety


@pytest.mark.parametrize(
    "url",
    [
        "/runs/%2E%2E/%2E%2E/etc/passwd/episodes",
        "/runs/%2Fetc/episodes",
        "/runs/..%2F..%2Fetc/episodes",
        "/runs/nope/episodes",
        "/runs/hostile/episodes/999",
        "/runs/hostile/episodes/1/content?stage=2&turn=9&call=0",
        "/static/..%2Fapp.py",
        "/static/%2E%2E/app.py",
        "/no/such/page",
        "/api/runs/%2Fetc/rows",
    ],
)
def test_unknown_and_traversal_urls_are_404(client: TestClient, url: str):
    r = client.get(url)
    assert r.status_code == 404
    assert "root:" not in r.text and "create_app" not in r.text


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("sort=bogus", "sort"),
        ("per_page=0", "per_page"),
        ("per_page=501", "per_page"),
        ("page=abc", "page"),
        ("page=99", "page"),
        ("failed=maybe", "failed"),
        ("taxonomy=nope", "taxonomy"),
        ("strategy=x", "strategy"),
        ("status=fine", "status"),
    ],
)
def test_bad_query_values_are_400_naming_the_parameter(client: TestClient, query: str, param: str):
    r = client.get(f"/runs/a/episodes?{query}")
    assert r.status_code == 400
    assert f"&#39;{param}&#39;" in r.text and "allowed" in r.text


def test_only_get_and_head(client: TestClient):
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        r = client.request(method, "/runs/a/episodes")
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    assert client.head("/").status_code == 200


def test_rows_api_returns_appended_lines(client: TestClient, runs_dir: Path):
    body = client.get("/api/runs/a/rows?after=0").json()
    assert len(body["rows"]) == 12 and body["summary"]["n_lines"] == 12
    with open(runs_dir / "a" / "results.jsonl", "a", encoding="utf-8") as f:
        f.write(hostile_episode("t-new", big=100).model_dump_json() + "\n")
    new = client.get("/api/runs/a/rows?after=12").json()
    assert [r["line"] for r in new["rows"]] == [13] and new["live"] is True
    assert client.get("/api/runs/a/rows?after=-1").status_code == 400


def test_local_hosts():
    assert all(is_local_host(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"))
    assert not any(is_local_host(h) for h in ("0.0.0.0", "192.168.1.5", "::", "example.org"))


def test_cli_missing_target_names_the_path(tmp_path: Path):
    missing = tmp_path / "no-runs-here"
    r = CliRunner().invoke(cli_app, ["view", str(missing)])
    assert r.exit_code == ConfigError.exit_code
    assert str(missing) in r.output


# --------------------------------------------------------------------------- export


def test_export_bundle_is_relative_and_complete(runs_dir: Path, tmp_path: Path):
    out = tmp_path / "bundle"
    report = export_run(RunCatalog([runs_dir]), "hostile", out)
    assert report.n_episodes == 5 and (out / MARKER).is_file()
    pages = [out / "index.html", *sorted((out / "episodes").glob("*.html"))]
    assert len(pages) == 6 and (out / "static" / "viewer.js").is_file() and (out / "static" / "viewer.css").is_file()
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert_safe(
            html.replace('src="../static/viewer.js"', 'src="/static/viewer.js"').replace(
                'src="static/viewer.js"', 'src="/static/viewer.js"'
            )
        )
        links = re.findall(r'\s(?:href|src|action)="([^"]*)"', html)
        for link in links:
            assert not link.startswith(("/", "http:", "https:")), (page.name, link)
            if link.startswith(("#", "data:")):
                continue
            assert (page.parent / link.split("#")[0]).resolve().is_file(), (page.name, link)
    index = (out / "index.html").read_text(encoding="utf-8")
    data = json.loads(
        re.search(r'<script type="application/json" id="export-rows">(.*?)</script>', index, re.S).group(1)
    )
    assert [r["line"] for r in data] == [1, 2, 3, 4, 5]
    # a second export replaces the first; a non-empty directory that is not an export is refused
    export_run(RunCatalog([runs_dir]), "a", out)
    assert len(list((out / "episodes").glob("*.html"))) == 12
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match=re.escape(str(other))):
        export_run(RunCatalog([runs_dir]), "a", other)
    assert (other / "notes.txt").read_text() == "keep me" and len(list(other.iterdir())) == 1


def test_cli_export_needs_one_run(runs_dir: Path, tmp_path: Path):
    r = CliRunner().invoke(cli_app, ["view", str(runs_dir), "--export", str(tmp_path / "x")])
    assert r.exit_code == 2 and "exactly one run" in r.output
    r = CliRunner().invoke(cli_app, ["view", str(runs_dir / "a"), "--export", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "x" / "index.html").is_file() and "file://" in r.output


# --------------------------------------------------------------------------- review fixes (issue 18)


def test_runs_page_is_compact(client: TestClient, runs_dir: Path):
    r = client.get("/")
    assert r.status_code == 200
    # the benchmark shows its last directory, the directory the tasks were read from as a tooltip
    bench = str((runs_dir.parent / "bench-ab").resolve())
    assert f'title="read from {bench}">bench-ab</td>' in r.text
    # the reward components are one cell per run, not one column each
    head = r.text[r.text.index("<thead>") : r.text.index("</thead>")]
    assert "s1.R_z" not in head and ">reward</th>" in head
    # the outcome reward of stage 1 is named R1 once (not R_z beside it), the stage total "S1 total"
    assert re.search(r'<strong>s1</strong> <span title="R1: outcome reward of stage 1[^"]*">R1</span> <span', r.text)
    assert re.search(r'<span title="stage-2 total: R_z \+ R_tool \+ R_fmt[^"]*">S2 total</span> <span', r.text)
    cell = r.text[r.text.index('<td class="comps') :]
    assert ">R_z<" not in cell[: cell.index("</td>")] and "> total <" not in cell[: cell.index("</td>")]


def test_episodes_table_puts_taxonomy_next_to_success(client: TestClient):
    r = client.get("/runs/a/episodes")
    heads = re.findall(r"<th[^>]*>([^<]+)</th>", r.text[r.text.index('id="episodes"') :])
    assert heads.index("taxonomy") == heads.index("Succ") + 1
    assert "turns (s1+s2)" in heads
    row = re.search(r'<tr data-line="1">(.*?)</tr>', r.text, re.S).group(1)
    cells = re.findall(r"<td([^>]*)>", row)
    assert cells[4] == ' class="tax"'  # the fifth cell, as in the head


def test_episode_page_tables_calls_and_navigation(client: TestClient):
    html = client.get("/runs/hostile/episodes/2").text
    # verdict: every field explained, counts of F and N
    for field in ("q1", "m1", "c1", "h1", "p2", "q2", "m2", "n2", "u2", "F", "N"):
        assert f'title="{field}: ' in html, field
    assert re.search(r'<td class="num nowrap">1 <span class="muted">/ 2</span></td>', html)  # m1 1 / F=2
    # reward: the outcome reward named R1 (stage 1; not also as R_z), tool, format, then the stage
    # total as "S1 total"; no stage row
    table = html[html.index('<table class="reward">') :]
    table = table[: table.index("</table>")]
    order = [table.index(k) for k in (">R1<", ">R_tool<", ">R_fmt<", ">S1 total<")]
    assert order == sorted(order) and ">stage<" not in table and ">R_z<" not in table
    # tool results as item tables with marks; the raw turn text folded, the pretty arguments shown
    assert '<table class="items">' in html and 'class="badge mark-reference" title="reference">p1</span>' in html
    assert "full result JSON" in html
    # the preview comes before the "show all" toggle
    wrap = html[html.index('<div class="fold-wrap">') :]
    assert wrap.index('class="preview') < wrap.index('<details class="fold')
    # the mini navigation links to the task and the stages
    nav = html[html.index('<nav class="mini-nav"') :]
    nav = nav[: nav.index("</nav>")]
    for href in ('href="#task"', 'href="#stage-1"', 'href="#stage-2"', 'href="#simulator"'):
        assert href in nav and href.replace('href="#', 'id="') in html


def test_tool_call_markup_is_folded_not_repeated(tmp_path: Path):
    args = {"query": "navy shirt", "top_k": 5}
    text = f"I will search.<tool_call>{json.dumps({'name': 'product_search', 'arguments': args})}</tool_call>"
    result = json.dumps({"results": [{"product_id": "p1", "title": "Navy shirt " + "long " * 60, "score": 2.5}]})
    ep = hostile_episode("t1", big=100)
    ep.stages[1].trajectory.steps[0] = step(text, call("product_search", args, result, ["p1"], "c9"))
    write_run(tmp_path / "r", [ep], [make_task("t1", "find a shirt")])
    html = local_client(create_app(RunCatalog([tmp_path / "r"]))).get("/runs/r/episodes/1").text
    assert '<pre class="">I will search.</pre>' in html  # the prose, without the markup
    raw = html[html.index('<details class="raw-turn">') :]
    assert raw.index("&lt;tool_call&gt;") < raw.index("</details>")  # the markup only inside the fold
    assert "2.500" in html and "Navy shirt long" in html and "…" in html  # score and cut title


def test_side_by_side_shows_the_task_once_and_aligns_stages(client: TestClient):
    r = client.get("/compare/episode?a=a&la=1&b=b&lb=1")
    assert r.status_code == 200
    assert r.text.count('data-action="toggle-gold"') == 1
    assert r.text.count(">Task</h2>") == 1 and r.text.count("<h3>Gold preferences</h3>") == 1
    assert r.text.count('<div class="pair pair-stage">') == 2  # one grid row per stage
    for side in ("a-", "b-"):
        assert f'id="{side}stage-1"' in r.text and f'id="{side}stage-2"' in r.text


def test_compare_page_signs_deltas_and_bootstraps_by_task(tmp_path: Path):
    bench = tmp_path / "bench"
    write_synthetic_run(tmp_path / "runs" / "a", 12, seed=0, bench_dir=bench, turns=3, result_chars=200, trials=3)
    write_synthetic_run(tmp_path / "runs" / "b", 12, seed=1, bench_dir=bench, turns=3, result_chars=200, trials=3)
    r = local_client(create_app(RunCatalog([tmp_path / "runs"]))).get("/compare?a=a&b=b")
    assert r.status_code == 200
    assert "cluster bootstrap by task" in r.text and "CI lies above 0" in r.text
    deltas = re.findall(r"<td class=\"num\"><span class=\"[^\"]*\" title=\"CI [^\"]+\">([^<]+)</span>", r.text)
    assert deltas and all(d[0] in "+-" for d in deltas), deltas
    row = r'<tr data-metric="turns"><td[^>]*>turns</td>\s*<td class="num">([^<]+)</td>'
    turns = re.search(row, r.text).group(1)
    assert not re.fullmatch(r"\d+\.\d{3}", turns), turns  # a mean count: at most two decimals


def test_formatting_helpers():
    from shopping_companion.viewer.app import bench_name, component_groups, fmt_count, fmt_signed, reward_rows

    assert fmt_signed(0.625) == "+0.625" and fmt_signed(-0.125) == "-0.125" and fmt_signed(None) == "–"
    assert fmt_count(3.0) == "3" and fmt_count(3.25) == "3.25" and fmt_count(float("nan")) == "–"
    assert bench_name("/tmp/x/bench/") == "bench" and bench_name(None) == "–"
    head, rest = reward_rows({"f_ans": 1.0, "R_fmt": 1.0, "stage": 2.0, "R_tool": 0.5, "R2": 0.3, "total": 9.0})
    assert [k for k, _, _ in head] == ["R2", "R_tool", "R_fmt"] and [k for k, _ in rest] == ["f_ans"]
    groups = component_groups({"s2.R2": 0.5, "s1.R_z": 0.1, "s1.total": 1.0, "s1.f_tc": 1.0})
    assert [g["stage"] for g in groups] == ["s1", "s2"] and groups[0]["total"] == 1.0
    assert [(k, v) for k, v, _ in groups[0]["head"]] == [("R1", 0.1)] and groups[0]["rest"] == [("f_tc", 1.0)]
    assert (groups[0]["total_label"], groups[1]["total_label"]) == ("S1 total", "S2 total")
