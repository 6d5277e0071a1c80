"""The URLs of the viewer's pages: the server's (:class:`ServerLinks`) and a static export's
(:class:`BundleLinks`); a page template gets one as ``L`` and never builds a URL itself."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["ServerLinks", "BundleLinks"]


def _q(run_id: str) -> str:
    return quote(run_id, safe="/")


class ServerLinks:
    """The URLs of the server's pages (absolute paths on the same host)."""

    bundle = False

    def runs(self) -> str:
        return "/"

    def episodes(self, run_id: str, **params: Any) -> str:
        query = {k: v for k, v in params.items() if v not in (None, "", False)}
        return f"/runs/{_q(run_id)}/episodes" + (f"?{urlencode(query)}" if query else "")

    def episode(self, run_id: str, line: int) -> str:
        return f"/runs/{_q(run_id)}/episodes/{int(line)}"

    def raw(self, run_id: str, line: int) -> str | None:
        return f"/runs/{_q(run_id)}/episodes/{int(line)}/raw"

    def content(self, run_id: str, line: int, stage: int, turn: int, call: int) -> str | None:
        query = urlencode({"stage": stage, "turn": turn, "call": call})
        return f"/runs/{_q(run_id)}/episodes/{int(line)}/content?{query}"

    def compare(self, a: str | None = None, b: str | None = None) -> str | None:
        query = {k: v for k, v in (("a", a), ("b", b)) if v}
        return "/compare" + (f"?{urlencode(query)}" if query else "")

    def compare_episode(self, a: str, la: int, b: str, lb: int) -> str | None:
        return "/compare/episode?" + urlencode({"a": a, "la": la, "b": b, "lb": lb})

    def static(self, name: str) -> str:
        return f"/static/{name}"

    def rows_api(self, run_id: str) -> str | None:
        return f"/api/runs/{_q(run_id)}/rows"

    def runs_api(self) -> str | None:
        return "/api/runs"


class BundleLinks:
    """The links of a static export (relative file names; no server): ``prefix`` leads from the
    page's folder to the bundle's root (``""`` for index.html, ``"../"`` for an episode page).
    Links with no file in a bundle (raw lines, compare, the runs list) are ``None``; the pages
    then show plain text instead."""

    bundle = True

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix

    def runs(self) -> str | None:
        return None

    def episodes(self, run_id: str, **params: Any) -> str:
        return f"{self.prefix}index.html"

    def episode(self, run_id: str, line: int) -> str:
        return f"{self.prefix}episodes/{int(line)}.html"

    def raw(self, run_id: str, line: int) -> str | None:
        return None

    def content(self, run_id: str, line: int, stage: int, turn: int, call: int) -> str | None:
        return None

    def compare(self, a: str | None = None, b: str | None = None) -> str | None:
        return None

    def compare_episode(self, a: str, la: int, b: str, lb: int) -> str | None:
        return None

    def static(self, name: str) -> str:
        return f"{self.prefix}static/{name}"

    def rows_api(self, run_id: str) -> str | None:
        return None

    def runs_api(self) -> str | None:
        return None
