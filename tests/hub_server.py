"""A real HTTP server on 127.0.0.1 laid out like the Hugging Face hub, for download tests:
``/datasets/<repo>/resolve/main/<path>`` answers with a redirect to ``/cdn/<path>`` (with the LFS
SHA-256 in ``X-Linked-Etag`` when one is set), which serves the bytes."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from shopping_companion.catalog.download import HF_REPO


class HubServer:
    """``files``: repository path -> bytes. ``etags``: repository path -> value sent as
    ``X-Linked-Etag`` on the redirect (omit for no header). ``truncate``: repository paths whose
    body is cut in half while announcing the full length. ``requests`` counts GETs per path."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.etags: dict[str, str] = {}
        self.truncate: set[str] = set()
        self.requests: dict[str, int] = {}
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output clean
                pass

            def do_GET(self):  # noqa: N802 - http.server API
                with server.lock:
                    server.requests[self.path] = server.requests.get(self.path, 0) + 1
                prefix = f"/datasets/{HF_REPO}/resolve/main/"
                if self.path.startswith(prefix):
                    repo_path = self.path[len(prefix) :]
                    if repo_path not in server.files:
                        self.send_error(404, "Entry not found")
                        return
                    self.send_response(302)
                    self.send_header("Location", f"/cdn/{repo_path}")
                    if repo_path in server.etags:
                        self.send_header("X-Linked-Etag", f'"{server.etags[repo_path]}"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.startswith("/cdn/"):
                    repo_path = self.path[len("/cdn/") :]
                    body = server.files.get(repo_path)
                    if body is None:
                        self.send_error(404)
                        return
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2] if repo_path in server.truncate else body)
                    return
                self.send_error(404)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def count(self, repo_path: str) -> int:
        return self.requests.get(f"/cdn/{repo_path}", 0)

    def __enter__(self) -> "HubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
