"""`shopcomp view` in a real browser: Playwright driving Debian's Chromium (/usr/bin/chromium)
against the real server (the CLI in a subprocess on 127.0.0.1) over real runs.

The real runs are built once per test session (tests/viewer/viewer_runs.py, shared with
test_viewer_store_real.py): a benchmark synthesised from the real catalog and SGD conversations,
evaluated by the real ``shopcomp eval`` command twice on the same benchmark and strategy (the
reference policy, and the scripted LLM policy of tests/scripted_policy.py served over HTTP by
tests/openai_server.py), so the compare page has pairs with real success transitions; this module
adds a synthetic run (benchmarks/viewer_synth.py) whose data carry a ``<script>`` element and an
``onerror`` handler. (``shopcomp quickstart --n-tasks 6`` instead would embed a ShareGPT haystack
with a cold embedding cache: measured 5.5 minutes on two busy cores, too slow for the suite;
docs/viewer.md.)

In the browser: the runs page (sorting a column by clicking its head), a run's episodes (the
"failed only" filter changes the rows), an episode (hiding the gold preferences, unfolding a think
block), compare and the side-by-side page, each asserted on rendered text; the hostile episode's
script never runs (no dialog, no window flag) and shows as visible text. No page may raise a
JavaScript error. A PNG screenshot of each page goes to ``$SHOPCOMP_ARTIFACTS_DIR/viewer/``
(default ``artifacts/viewer/`` in the repository, gitignored); the paths are printed.

Without Playwright or Chromium the module is skipped with the reason, unless
``SHOPCOMP_REQUIRE_BROWSER=1`` (set by .ci/run), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.viewer_synth import write_synthetic_run

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("SHOPCOMP_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
#: Planted in the hostile run: it must show as text and never execute.
XSS = '<script>window.__pwned = 1; alert("xss")</script><img src=x onerror="window.__pwned = 2; alert(2)">'
URL = re.compile(r"http://127\.0\.0\.1:\d+/")


def _browser_problem() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (it is in the test extra: pip install -e '.[test]')"
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return (
            f"no Chromium at {CHROMIUM} (install Debian's chromium: apt-get install chromium, as .ci/run "
            "does; or point SHOPCOMP_CHROMIUM at one; docs/viewer.md)"
        )
    return None


def _need_browser() -> None:
    problem = _browser_problem()
    if problem is None:
        return
    if os.environ.get("SHOPCOMP_REQUIRE_BROWSER") == "1":
        pytest.fail(f"SHOPCOMP_REQUIRE_BROWSER=1 but {problem}", pytrace=False)
    pytest.skip(problem)


def _artifacts() -> Path:
    d = Path(os.environ.get("SHOPCOMP_ARTIFACTS_DIR") or REPO / "artifacts") / "viewer"
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def runs_dir(request) -> Path:
    """``runs/`` holding ``reference`` and ``scripted`` (real evals of one benchmark, 2 trials; the
    session's :func:`~tests.viewer.viewer_runs.viewer_runs`) and ``hostile`` (synthetic, 3
    episodes, the first carrying :data:`XSS`). The session's real runs (with the catalog index,
    about a minute) are asked for only once a browser is known to be there."""
    _need_browser()
    runs = request.getfixturevalue("viewer_runs").cli_runs
    write_synthetic_run(runs / "hostile", 3, seed=0, turns=3, result_chars=300, payload=XSS)
    return runs


class ViewServer:
    """``shopcomp view RUNS --port 0`` in a subprocess; ``base``: the URL it printed."""

    def __init__(self, runs: Path, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shopping_companion.cli", "view", str(runs), "--port", "0"],
            cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output: list[str] = []
        printed = threading.Event()

        def drain() -> None:
            for line in self.proc.stdout:
                self.output.append(line)
                if URL.search(line):
                    printed.set()

        threading.Thread(target=drain, daemon=True).start()
        if not printed.wait(120):
            self.stop()
            raise AssertionError("shopcomp view printed no URL:\n" + "".join(self.output)[-3000:])
        self.base = next(m.group(0) for x in self.output if (m := URL.search(x)))
        deadline = time.monotonic() + 30
        while httpx.get(self.base + "healthz", timeout=5).status_code != 200:
            assert time.monotonic() < deadline, "the server printed its URL but /healthz does not answer"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def server(runs_dir: Path) -> Iterator[ViewServer]:
    s = ViewServer(runs_dir, cwd=runs_dir.parent)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    _need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


class Tab:
    """A page with its JavaScript errors, dialogs and console messages recorded."""

    def __init__(self, browser, base: str) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.base = base
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def goto(self, path: str) -> str:
        """Open ``path`` (relative to the server), assert HTTP 200; returns the main text."""
        resp = self.page.goto(self.base + path.lstrip("/"))
        assert resp is not None and resp.status == 200, f"{path}: HTTP {resp and resp.status}"
        return self.text()

    def text(self) -> str:
        return self.page.inner_text("body")

    def shot(self, name: str) -> Path:
        path = _artifacts() / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def tab(browser, server: ViewServer) -> Iterator[Tab]:
    t = Tab(browser, server.base)
    yield t
    try:
        assert t.errors == [], f"JavaScript errors: {t.errors}"
    finally:
        t.close()


def _column(page, table: str, header: str) -> list[str]:
    """The texts of column ``header`` of table ``#table``, top to bottom."""
    heads = [h.strip() for h in page.locator(f"#{table} thead th").all_inner_texts()]
    idx = heads.index(header)
    return [c.strip() for c in page.locator(f"#{table} tbody tr td:nth-child({idx + 1})").all_inner_texts()]


def _as_number(text: str) -> float:
    t = text.strip().rstrip("%")
    return float(t) if t not in ("", "–", "-") else float("inf")


def test_runs_page_lists_and_sorts(tab: Tab):
    text = tab.goto("/")
    for name in ("reference", "scripted", "hostile"):
        assert name in text
    assert "Runs (3)" in text
    page = tab.page
    runs_before = _column(page, "runs", "run")
    page.locator("#runs thead th", has_text=re.compile(r"^episodes$")).click()
    episodes = [_as_number(x) for x in _column(page, "runs", "episodes")]
    assert episodes == sorted(episodes), episodes
    page.locator("#runs thead th", has_text=re.compile(r"^episodes$")).click()  # second click: descending
    episodes = [_as_number(x) for x in _column(page, "runs", "episodes")]
    assert episodes == sorted(episodes, reverse=True), episodes
    assert "sorted-desc" in (page.locator("#runs thead th", has_text=re.compile(r"^episodes$")).get_attribute("class"))
    assert sorted(_column(page, "runs", "run")) == sorted(runs_before)
    tab.shot("runs")


def test_episodes_filter_and_episode_page(tab: Tab):
    page = tab.page
    tab.goto("/")
    page.get_by_role("link", name="reference", exact=True).click()
    page.wait_for_load_state()
    text = tab.text()
    assert "8 matching line(s)" in text  # 4 tasks × 2 trials
    all_rows = page.locator("#episodes tbody tr").count()
    assert all_rows == 8
    heads = [h.strip() for h in page.locator("#episodes thead th").all_inner_texts()]
    acc = heads.index("Acc")  # the outcome rewards, then the stage totals (issue 31: one name per number)
    assert heads[acc + 1 : acc + 7] == ["R1", "R2", "S1 total", "S2 total", "R_tool", "R_fmt"]
    tab.shot("episodes")

    successes = _column(page, "episodes", "Succ")
    n_failed = sum(s == "fail" for s in successes)
    assert 0 < n_failed < all_rows, f"the reference policy should fail some but not all episodes: {successes}"
    page.locator("input[name=failed]").check()
    page.get_by_role("button", name="Apply").click()
    page.wait_for_load_state()
    assert "failed=1" in page.url
    assert page.locator("#episodes tbody tr").count() == n_failed
    assert set(_column(page, "episodes", "Succ")) == {"fail"}
    assert f"{n_failed} matching line(s)" in tab.text()
    tab.shot("episodes_failed_only")

    # open the first failed episode
    page.locator("#episodes tbody tr").first.locator("a").first.click()
    page.wait_for_load_state()
    text = tab.text()
    assert "Hide gold preferences" in text
    assert "Stage 1" in text and "Stage 2" in text
    strip = page.locator("#summary").inner_text()  # the strip's keys are shown in capitals
    assert "OUTCOME R1 · R2" in strip and re.search(r"\nR1 [\d.]+ · R2 [\d.]+\n", strip), strip
    assert re.search(r"\nS1 total [\d.]+ · S2 total [\d.]+\n", strip), strip
    rewards = page.locator("table.reward").first.inner_text()
    assert "R1" in rewards and "S1 total" in rewards and "R_z" not in rewards
    for tool in ("mem_search", "product_search"):
        assert tool in text
    gold = page.locator(".gold").first
    assert gold.is_visible()
    page.get_by_role("button", name="Hide gold preferences").first.click()
    assert not gold.is_visible()
    assert page.get_by_text("Hidden for blind reading").first.is_visible()
    page.get_by_role("button", name="Show gold preferences").first.click()
    assert gold.is_visible()
    tab.shot("episode")


def test_think_block_unfolds(tab: Tab):
    page = tab.page
    tab.goto("/runs/scripted/episodes")
    page.locator("#episodes tbody tr").first.locator("a").first.click()
    page.wait_for_load_state()
    think = page.locator("details.think").first
    assert think.count() == 1, "the scripted policy thinks in every turn: a think block is expected"
    body = think.locator("pre").first
    assert not body.is_visible()
    think.locator("summary").click()
    assert think.evaluate("d => d.open") is True
    assert body.is_visible() and body.inner_text().strip()
    tab.shot("episode_think_open")


def test_compare_and_side_by_side(tab: Tab):
    page = tab.page
    tab.goto("/compare")
    page.locator("select[name=a]").select_option("reference")
    page.locator("select[name=b]").select_option("scripted")
    page.get_by_role("button", name="Compare").click()
    page.wait_for_load_state()
    text = tab.text()
    assert "8 paired episode(s)" in text
    assert "Metric deltas" in text and "Success transitions" in text
    for key in ("won", "lost", "both", "neither"):
        assert key in text
    assert re.search(r"\[-?\d", text), "a bootstrap CI is shown"
    metrics = [m.strip() for m in page.locator("table.deltas:not(.components) tbody td:first-child").all_inner_texts()]
    assert metrics == ["Succ", "Acc", "R1", "R2", "S1 total", "S2 total", "R_tool", "R_fmt", "turns", "tool_calls"]
    tip = page.locator("table.deltas:not(.components) tbody td:first-child", has_text=re.compile(r"^R1$"))
    assert "outcome reward of stage 1" in tip.get_attribute("title")
    comps = [m.strip() for m in page.locator("table.deltas.components tbody td:first-child").all_inner_texts()]
    for name in ("s1 R_tool", "s1 f_ans", "s2 R_fmt", "s2 f_rec", "s2 n_tool_calls"):
        assert name in comps, comps
    assert not {"s1 R_z", "s2 R2", "s1 total"} & set(comps) and "only in" not in text  # one rubric: nothing one-sided
    tab.shot("compare")
    page.get_by_role("link", name="A | B").first.click()
    page.wait_for_load_state()
    assert "la=" in page.url and "lb=" in page.url
    text = tab.text()
    assert "reference" in text and "scripted" in text
    assert text.count("Stage 2") >= 2, "both episodes are shown side by side"
    tab.shot("compare_episode")


def test_hostile_trajectory_renders_as_text(tab: Tab):
    page = tab.page
    text = tab.goto("/runs/hostile/episodes/1")
    page.wait_for_timeout(300)  # an image error handler would have fired by now
    assert tab.dialogs == [], f"a dialog opened: {tab.dialogs}"
    assert page.evaluate("() => window.__pwned === undefined")
    assert '<script>window.__pwned = 1; alert("xss")</script>' in text
    assert 'onerror="window.__pwned = 2' in text
    assert page.locator("main script:not([type='application/json'])").count() == 0
    # expand everything: folded text is rendered too, and still inert
    page.get_by_role("button", name="Expand all").first.click()
    page.wait_for_timeout(200)
    assert tab.dialogs == [] and page.evaluate("() => window.__pwned === undefined")
    tab.shot("hostile_episode")
    tab.goto("/runs/hostile/episodes?q=pwned")  # the instruction (cut at 160 characters) and its tooltip
    assert page.locator("#episodes tbody tr").count() == 1
    assert "<script>" in (page.locator("#episodes td.instr").first.get_attribute("title") or "")
    assert page.evaluate("() => window.__pwned === undefined") and tab.dialogs == []


# ----------------------------------------------------------------------------- added runs
# The tests below add runs to the served directory (the server lists them as they appear), so they
# come after the tests that count the runs.


def _copy_run(runs: Path, src: str, name: str, n_lines: int) -> tuple[Path, list[str]]:
    """``runs/name``: the first ``n_lines`` lines of run ``src``'s results and its config.yaml (its
    benchmark path is absolute); no summary.json, so the run is live while it is being written."""
    lines = (runs / src / "results.jsonl").read_text().splitlines(keepends=True)
    run = runs / name
    run.mkdir()
    (run / "config.yaml").write_text((runs / src / "config.yaml").read_text())
    (run / "results.jsonl").write_text("".join(lines[:n_lines]))
    return run, lines


def _wait_text(page, selector: str, expected: str, timeout_ms: int = 20_000) -> None:
    page.wait_for_function(
        "([sel, want]) => { const el = document.querySelector(sel); return !!el && el.textContent.trim() === want; }",
        arg=[selector, expected],
        timeout=timeout_ms,
    )


def test_live_pages_update_as_episodes_are_appended(tab: Tab, runs_dir: Path):
    """A live run's episodes page strip and the runs page's cells follow appended episodes (the
    pages poll the JSON API every 2.5 s); the numbers on screen become those of the whole file."""
    from shopping_companion.viewer.app import fmt_pct
    from shopping_companion.viewer.store import RunCatalog

    page = tab.page
    run, lines = _copy_run(runs_dir, "reference", "grow-a", 2)
    assert len(lines) == 8
    tab.goto("/runs/grow-a/episodes")
    assert page.locator("#live-count").inner_text().strip() == "2"
    assert page.locator("#episodes tbody tr").count() == 2
    with open(run / "results.jsonl", "a") as f:
        f.write("".join(lines[2:]))
    want = RunCatalog([runs_dir]).get("grow-a").summary
    _wait_text(page, "#live-count", "8")
    _wait_text(page, ".strip [data-live-field=n_episodes]", "8")
    assert page.locator(".strip [data-live-field=acc]").inner_text().strip() == fmt_pct(want.acc)
    assert page.locator(".strip [data-live-field=succ]").inner_text().strip() == fmt_pct(want.succ)
    for k, v in want.pass_hat_k.items():
        cell = page.locator(f".strip [data-live-field='pass_hat_k.{k}']")
        if cell.count():
            assert cell.inner_text().strip() == fmt_pct(v)
    page.wait_for_function("() => document.querySelectorAll('#episodes tbody tr').length === 8", timeout=10_000)
    # the rows the script appended put each number under its head, as the server's rows do
    rows = {r.line: r for r in RunCatalog([runs_dir]).get("grow-a").query(limit=50).rows}
    for head, attr in (("R1", "r1"), ("R2", "r2"), ("S1 total", "stage1_total"), ("S2 total", "stage2_total")):
        shown = _column(page, "episodes", head)
        assert len(shown) == 8
        for line_no, cell in zip(range(1, 9), shown):
            want_v = getattr(rows[line_no], attr)
            assert (cell == "–") if want_v is None else abs(float(cell) - want_v) < 1e-3, (head, line_no, cell, want_v)
    tab.shot("episodes_live")

    run_b, lines_b = _copy_run(runs_dir, "scripted", "grow-b", 3)
    tab.goto("/")
    row = "#runs tbody tr[data-run='grow-b']"
    assert page.locator(f"{row} [data-live-field=n_episodes]").inner_text().strip() == "3"
    with open(run_b / "results.jsonl", "a") as f:
        f.write("".join(lines_b[3:]))
    want_b = RunCatalog([runs_dir]).get("grow-b").summary
    _wait_text(page, f"{row} [data-live-field=n_episodes]", str(len(lines_b)))
    assert page.locator(f"{row} [data-live-field=acc]").inner_text().strip() == fmt_pct(want_b.acc)
    assert page.locator(f"{row} [data-live-field=succ]").inner_text().strip() == fmt_pct(want_b.succ)
    assert page.locator(f"{row} [data-live-field=n_scored]").inner_text().strip() == str(want_b.n_scored)
    tab.shot("runs_live")


def test_sft_kept_and_grpo_dump_pages(tab: Tab, runs_dir: Path, tmp_path: Path):
    """An SFT ``kept.jsonl`` (the real selection, :func:`~shopping_companion.sft.collect.select_kept`,
    over the real reference run) and a GRPO validation dump made from the same episodes the way verl
    writes one (tests/fixtures/viewer/grpo_dump.py) open with their tasks, tool calls and marks."""
    import yaml

    from shopping_companion.benchmark.report import read_results
    from shopping_companion.sft.collect import select_kept
    from shopping_companion.types import Task
    from tests.fixtures.viewer.grpo_dump import dump_entry, tiny_tokenizer, write_dump

    page = tab.page
    results = read_results(runs_dir / "reference" / "results.jsonl")
    kept = select_kept(results)
    assert kept, "the reference policy succeeds on some stages"
    sft = runs_dir / "sft-collect"
    sft.mkdir()
    config = (runs_dir / "reference" / "config.yaml").read_text()
    (sft / "config.yaml").write_text(config)
    (sft / "kept.jsonl").write_text("".join(k.model_dump_json() + "\n" for k in kept))
    bench = Path(yaml.safe_load(config)["bench"]["path"])
    tasks = {
        t.task_id: t
        for t in (Task.model_validate_json(x) for x in (bench / "tasks.jsonl").read_text().splitlines() if x)
    }

    text = tab.goto("/runs/sft-collect/episodes")
    assert "sft_kept" in text and f"{len(kept)} matching line(s)" in text
    assert kept[0].task_id in text
    page.locator("#episodes tbody tr").first.locator("a").first.click()
    page.wait_for_load_state()
    text = tab.text()
    assert tasks[kept[0].task_id].instruction in text and "Hide gold preferences" in text
    assert kept[0].reason in text
    assert "could not be read as an episode" not in text  # a kept stage is an episode: no raw-line box
    tab.shot("sft_kept_episode")

    tok = tiny_tokenizer(tmp_path / "tok")
    entries = [dump_entry(s, tasks[r.task_id], tok, step=5) for r in results if r.stages for s in r.stages]
    val = runs_dir / "grpo" / "val"
    write_dump(val / "5.jsonl", entries)
    (val / "config.yaml").write_text(f"bench:\n  path: {bench}\n")
    text = tab.goto("/runs/grpo/val/5.jsonl/episodes")
    assert "grpo_val" in text and f"{len(entries)} matching line(s)" in text
    assert results[0].task_id in text and "unknown" not in _column(page, "episodes", "task")
    tab.shot("grpo_episodes")
    text = tab.goto("/runs/grpo/val/5.jsonl/episodes/2")  # stage 2 of the first episode
    stage2 = results[0].stages[1].trajectory
    assert tasks[results[0].task_id].instruction in text and "Hide gold preferences" in text
    assert "product_search" in text and "reference" in text
    assert "could not be read as an episode" not in text
    assert f"Timeline ({len(stage2.steps)} turn(s))" in text
    n_calls = sum(len(s.tool_calls) for s in stage2.steps)
    assert page.locator(".call").count() >= n_calls > 0
    tab.shot("grpo_episode")
