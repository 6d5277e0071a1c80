"""``shopcomp view`` as a real server: the CLI started in a subprocess on 127.0.0.1 (port 0: a
free one, the printed URL says which), pages fetched with httpx, a line appended to a results file
while it runs shows up in the rows API, raw traversal requests (sent on a socket, unnormalised)
answer 404, and a non-local ``--host`` prints the warning."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.viewer_synth import write_synthetic_run
from tests.viewer.test_viewer_app import XSS, hostile_episode

URL = re.compile(r"http://(\S+):(\d+)/")


class Server:
    """A ``shopcomp view`` subprocess; ``base``: its URL; ``stderr``: what it printed there."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "SHOPCOMP_CACHE_DIR": str(cwd / "cache")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shopping_companion.cli", "view", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr_lines: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.base = self._wait_url(timeout=60)

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def _wait_url(self, timeout: float) -> str:
        found: list[str] = []

        def read() -> None:
            for line in self.proc.stdout:
                m = URL.search(line)
                if m:
                    found.append(m.group(0))
                    return

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        if not found:
            self.stop()
            raise AssertionError(f"no URL printed; stderr: {''.join(self.stderr_lines)[-2000:]}")
        base = found[0]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "healthz", timeout=2).status_code == 200:
                    return base
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError("the server printed its URL but does not answer")

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=5)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    write_synthetic_run(root / "live", 6, seed=0, turns=3, result_chars=300)
    return root


@pytest.fixture
def server(runs: Path, tmp_path: Path) -> Iterator[Server]:
    s = Server([str(runs), "--port", "0"], cwd=tmp_path)
    yield s
    s.stop()


def raw_get(base: str, path: str, host_header: str | None = None) -> tuple[int, str]:
    """GET ``path`` exactly as written (no client-side dot-segment normalisation), with
    ``host_header`` as the Host (default: the server's address)."""
    host, port = URL.search(base).groups()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host_header or host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode("utf-8", "replace")


def test_serves_pages_and_live_rows(server: Server, runs: Path):
    base = server.base
    assert base.startswith("http://127.0.0.1:")
    home = httpx.get(base)
    assert home.status_code == 200 and 'href="/runs/live/episodes"' in home.text
    assert "default-src 'self'" in home.headers["content-security-policy"]
    eps = httpx.get(base + "runs/live/episodes")
    assert eps.status_code == 200 and eps.text.count("<tr data-line=") == 6
    ep = httpx.get(base + "runs/live/episodes/1")
    assert ep.status_code == 200 and 'id="summary"' in ep.text
    assert httpx.get(base + "static/viewer.js").status_code == 200
    assert httpx.post(base + "runs/live/episodes").status_code == 405

    # live: a line appended while the server runs reaches the rows API
    assert httpx.get(base + "api/runs/live/rows?after=6").json()["rows"] == []
    with open(runs / "live" / "results.jsonl", "a", encoding="utf-8") as f:
        f.write(hostile_episode("late-task", big=500).model_dump_json() + "\n")
    deadline = time.monotonic() + 15
    rows: list = []
    while time.monotonic() < deadline and not rows:
        body = httpx.get(base + "api/runs/live/rows?after=6").json()
        rows = body["rows"]
        time.sleep(0.2)
    assert [r["line"] for r in rows] == [7] and rows[0]["task_id"] == "late-task"
    assert body["live"] is True
    page = httpx.get(base + "runs/live/episodes/7")
    assert page.status_code == 200 and "<script>alert" not in page.text and "&lt;script&gt;" in page.text
    assert XSS not in page.text


@pytest.mark.parametrize(
    "path",
    ["/runs/../../etc/passwd/episodes", "/runs/%2Fetc/episodes", "/static/../app.py", "/static/../../../etc/passwd"],
)
def test_raw_traversal_requests_are_404(server: Server, path: str):
    status, body = raw_get(server.base, path)
    assert status == 404
    assert "root:" not in body and "def create_app" not in body


def test_non_local_host_warns(runs: Path, tmp_path: Path):
    s = Server([str(runs), "--host", "0.0.0.0", "--port", "0"], cwd=tmp_path)
    try:
        assert "warning: listening on 0.0.0.0" in s.stderr or _wait_for(lambda: "warning" in s.stderr)
        assert "no authentication" in s.stderr
        assert _wait_for(lambda: "DNS rebinding" in s.stderr)  # every interface: any Host is answered, it says so
        port = URL.search(s.base).group(2)
        assert raw_get(s.base, "/", host_header=f"some-name.example:{port}")[0] == 200
    finally:
        s.stop()


def test_foreign_host_header_is_refused(server: Server):
    """DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 sends
    ``Host: evil.example``; the local server answers 400 and lists nothing."""
    port = URL.search(server.base).group(2)
    for host in ("evil.example", f"evil.example:{port}"):
        for path in ("/", "/runs/live/episodes/1/raw", "/api/runs/live/rows"):
            status, body = raw_get(server.base, path, host_header=host)
            assert status == 400 and body == "Invalid host header", (host, path)
    assert raw_get(server.base, "/", host_header=f"localhost:{port}")[0] == 200


def test_ctrl_c_stops_cleanly(runs: Path, tmp_path: Path):
    s = Server([str(runs), "--port", "0"], cwd=tmp_path)
    s.proc.send_signal(signal.SIGINT)
    try:
        rc = s.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        s.stop()
        raise
    rest = s.proc.stdout.read()
    assert rc == 0, s.stderr
    assert "shopcomp view: stopped" in rest
    assert "interrupted" not in s.stderr and "Traceback" not in s.stderr


def _wait_for(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_port_in_use_is_a_config_error(tmp_path: Path, runs: Path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "shopping_companion.cli", "view", str(runs), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
    assert r.returncode == 2
    assert f"--port {port}" in r.stderr
