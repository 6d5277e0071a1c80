"""`shopcomp view` in a real browser: Playwright driving Debian's Chromium (/usr/bin/chromium)
against the real server (the CLI in a subprocess on 127.0.0.1) over real runs.

The real runs are built once per test session (tests/integration/viewer_runs.py, shared with
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
    session's :func:`~tests.integration.viewer_runs.viewer_runs`) and ``hostile`` (synthetic, 3
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
