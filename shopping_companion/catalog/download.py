"""Download Amazon Reviews 2023 categories (McAuley Lab) from the Hugging Face hub into a cache.

The release lives in the dataset repository ``McAuley-Lab/Amazon-Reviews-2023``:

* item metadata: ``raw/meta_categories/meta_<Category>.jsonl``
* reviews:       ``raw/review_categories/<Category>.jsonl``

fetched from ``<endpoint>/datasets/McAuley-Lab/Amazon-Reviews-2023/resolve/<revision>/<path>``.
The endpoint is ``$SHOPCOMP_HF_ENDPOINT``, else ``$HF_ENDPOINT``, else ``https://huggingface.co``
(a mirror, or a local ``http.server`` in tests); the revision ``$SHOPCOMP_HF_REVISION`` or
``main``.

:func:`download_file` streams to a temporary file next to the destination with a progress bar,
computes its SHA-256 on the way and checks it against the expected value when one is known --
from :data:`KNOWN_SHA256` (the hub's Git LFS hashes of the files), an explicit argument, or the
server's ``X-Linked-Etag`` header (the LFS SHA-256 the hub sends for LFS files) -- then fsyncs it
and renames it into place, so an interrupted download never leaves a partial file under the final
name. The computed hash goes to a ``<file>.sha256.json`` sidecar; a later call re-hashes the cached
copy and reuses it only if it still matches (a damaged copy is downloaded again). Without network
the error says so and how to use local data instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Literal

from shopping_companion.paths import cache_dir
from shopping_companion.retry import Attempts, Backoff
from shopping_companion.runs import file_sha256  # re-exported (public name of this module)
from shopping_companion.runs import write_text_atomic
from shopping_companion.errors import DownloadError  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

HF_REPO = "McAuley-Lab/Amazon-Reviews-2023"
DEFAULT_ENDPOINT = "https://huggingface.co"
ENV_ENDPOINT = "SHOPCOMP_HF_ENDPOINT"
ENV_REVISION = "SHOPCOMP_HF_REVISION"

#: The smallest category of the release (641 items with reviews, 1.4 MB of metadata, 16,216
#: reviews in 9 MB); its metadata carries prices, stores, features, descriptions and details.
DEFAULT_CATEGORY = "Subscription_Boxes"

#: SHA-256 of release files (repository path -> hex), from the hub's Git LFS pointers. The review
#: file of Subscription_Boxes was also checked against the byte-identical copy in the shared data
#: directory (``reviews/amazon2023_Subscription_Boxes.jsonl.gz``, decompressed).
KNOWN_SHA256: dict[str, str] = {
    "raw/meta_categories/meta_Subscription_Boxes.jsonl": "b29c7bb1e3ad1419c33142c76d39782a9b8ae2fcbe27641186b88a10e1f31575",
    "raw/review_categories/Subscription_Boxes.jsonl": "52e08112faa2b8769b35d364cbd3b8ac674ddd56621b171e7531a5a2071f460f",
    "raw/meta_categories/meta_Magazine_Subscriptions.jsonl": "b325bc690a4b705338dfc3dd45ace5ec643dc6212cbb0c614a9b05f236ec12ab",
    "raw/review_categories/Magazine_Subscriptions.jsonl": "bf36b04bbfb41f43c49b4adbdc13969014311ffb2344f706d13c35cdea5662da",
    "raw/meta_categories/meta_All_Beauty.jsonl": "1cfbdf6d2ccf9c3ac52a4508b15f31f8f340508a245b65c3e3b5f461e06e97ef",
}

Kind = Literal["meta", "reviews"]
_CATEGORY = re.compile(r"[A-Za-z0-9_]+")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 16
#: Waits between download attempts: 2, 4, 8, then 10 s.
_BACKOFF = Backoff(2.0, 10.0)


@dataclass(frozen=True)
class DownloadResult:
    """A file in the cache: ``path``, its ``sha256`` (hex), ``size`` in bytes, whether this call
    ``downloaded`` it (False: a verified cached copy was reused) and what the hash was checked
    against (``verified_against``: ``"known"`` table/argument, ``"server"`` header, ``"sidecar"``
    the hash recorded when the cached copy was downloaded, or ``"none"``)."""

    path: Path
    sha256: str
    size: int
    downloaded: bool
    verified_against: str


def hf_endpoint() -> str:
    """The hub endpoint without a trailing slash (see the module docstring)."""
    return (os.environ.get(ENV_ENDPOINT) or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def amazon2023_repo_path(kind: Kind, category: str) -> str:
    """Repository path of a category file: ``raw/meta_categories/meta_<Category>.jsonl`` or
    ``raw/review_categories/<Category>.jsonl``. Raises ``ValueError`` for an unknown ``kind`` or a
    category that is not ``[A-Za-z0-9_]+`` (e.g. ``"All_Beauty"``)."""
    if not isinstance(category, str) or not _CATEGORY.fullmatch(category):
        raise ValueError(f"category: {category!r} must look like 'All_Beauty' (letters, digits, '_')")
    if kind == "meta":
        return f"raw/meta_categories/meta_{category}.jsonl"
    if kind == "reviews":
        return f"raw/review_categories/{category}.jsonl"
    raise ValueError(f"kind: must be 'meta' or 'reviews', got {kind!r}")


def amazon2023_url(kind: Kind, category: str, endpoint: str | None = None, revision: str | None = None) -> str:
    """Download URL of a category file on the hub (or ``endpoint``)."""
    base = (endpoint or hf_endpoint()).rstrip("/")
    rev = revision or os.environ.get(ENV_REVISION) or "main"
    return f"{base}/datasets/{HF_REPO}/resolve/{rev}/{amazon2023_repo_path(kind, category)}"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.json")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    lock = path.with_name(f".{path.name}.lock")
    with open(lock, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def verify_cached(path: str | os.PathLike[str], expected_sha256: str | None = None) -> str | None:
    """The SHA-256 of a cached file if it is intact, else None.

    Intact: the file and its sidecar exist, the file's current hash equals the sidecar's (and
    ``expected_sha256`` when given)."""
    p = Path(path)
    side = _sidecar(p)
    if not p.is_file() or not side.is_file():
        return None
    try:
        recorded = json.loads(side.read_text(encoding="utf-8"))["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if expected_sha256 and recorded != expected_sha256.lower():
        return None
    actual = file_sha256(p)
    return actual if actual == recorded else None


def _progress(total: int | None, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        disable=not enabled,
        file=sys.stderr,
        leave=False,
    )


def download_file(
    url: str,
    dest: str | os.PathLike[str],
    *,
    expected_sha256: str | None = None,
    progress: bool = True,
    timeout: float = 60.0,
    retries: int = 2,
) -> DownloadResult:
    """Download ``url`` to ``dest`` (see the module docstring), or reuse a verified copy there.

    ``expected_sha256``: hex digest to check (None: use the server's ``X-Linked-Etag`` when it is
    a SHA-256, else record the computed hash without a check). ``progress``: show a tqdm bar on
    stderr. ``timeout``: seconds per network operation. ``retries``: extra attempts after a
    network error (not after an HTTP 4xx or a checksum mismatch).

    Raises :class:`DownloadError` when offline / unreachable (the message names the URL and how to
    use local data or a mirror instead), on an HTTP error status, or when the downloaded bytes do
    not match the expected hash (the partial file is deleted; nothing is left under ``dest``).
    """
    path = Path(dest)
    path.parent.mkdir(parents=True, exist_ok=True)
    want = expected_sha256.lower() if expected_sha256 else None
    if want is not None and not _SHA256.fullmatch(want):
        raise ValueError(f"expected_sha256: {expected_sha256!r} is not a hex SHA-256")
    with _file_lock(path):
        cached = verify_cached(path, want)
        if cached is not None:
            return DownloadResult(path, cached, path.stat().st_size, False, "known" if want else "sidecar")
        if path.exists():
            log.warning("cached %s is missing its checksum or damaged; downloading it again", path)
        attempts = Attempts(retries, _BACKOFF)  # no deadline: every attempt is made
        for _ in attempts:
            try:
                return _download_once(url, path, want, progress, timeout)
            except _Transient as e:
                failed = e
                if not attempts.backoff():
                    break
        raise DownloadError(
            f"cannot download {url}: {failed.reason}. No network? Run with a local data directory "
            f"(--data-dir or $SHOPCOMP_DATA_DIR), or set ${ENV_ENDPOINT} to a reachable mirror "
            "of the Hugging Face hub."
        ) from failed.__cause__


class _Transient(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _RedirectRecorder(urllib.request.HTTPRedirectHandler):
    """Follows redirects like urllib and remembers the hub's ``X-Linked-Etag`` header, which the
    hub sends on the redirect to its CDN rather than on the final response."""

    def __init__(self) -> None:
        super().__init__()
        self.linked_etag: str | None = None

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102 - urllib API
        etag = headers.get("X-Linked-Etag")
        if etag:
            self.linked_etag = etag
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _download_once(url: str, path: Path, want: str | None, progress: bool, timeout: float) -> DownloadResult:
    req = urllib.request.Request(url, headers={"User-Agent": "shopping-companion"})
    recorder = _RedirectRecorder()
    try:
        resp = urllib.request.build_opener(recorder).open(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code >= 500 or e.code == 429:
            raise _Transient(f"HTTP {e.code} {e.reason}") from e
        hint = " (is the category name right? e.g. All_Beauty, Subscription_Boxes)" if e.code == 404 else ""
        raise DownloadError(f"cannot download {url}: HTTP {e.code} {e.reason}{hint}") from e
    except (urllib.error.URLError, OSError) as e:
        raise _Transient(str(getattr(e, "reason", e))) from e
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.part-", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with resp, os.fdopen(fd, "wb") as out:
            linked = resp.headers.get("X-Linked-Etag") or recorder.linked_etag or ""
            server_hash = linked.strip().removeprefix("W/").strip('"').lower()
            if want is None and _SHA256.fullmatch(server_hash):
                want, against = server_hash, "server"
            else:
                against = "known" if want else "none"
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            h = hashlib.sha256()
            size = 0
            with _progress(total, path.name, progress) as bar:
                while True:
                    try:
                        chunk = resp.read(_CHUNK)
                    except (OSError, urllib.error.URLError) as e:
                        raise _Transient(f"connection lost after {size} bytes ({e})") from e
                    if not chunk:
                        break
                    out.write(chunk)
                    h.update(chunk)
                    size += len(chunk)
                    bar.update(len(chunk))
            if total is not None and size != total:
                raise _Transient(f"connection closed after {size} of {total} bytes")
            out.flush()
            os.fsync(out.fileno())
        digest = h.hexdigest()
        if want is not None and digest != want:
            raise DownloadError(
                f"checksum mismatch for {url}: got sha256 {digest}, expected {want} ({against}); the file was "
                "discarded. A proxy or mirror may have altered it (retry, or use another endpoint), or the "
                "release changed the file (then update KNOWN_SHA256 in shopping_companion/catalog/download.py)."
            )
        os.replace(tmp, path)
        side = {
            "sha256": digest,
            "size": size,
            "url": url,
            "verified_against": against,
            "downloaded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        write_text_atomic(_sidecar(path), json.dumps(side, indent=2))
        log.info("downloaded %s (%d bytes, sha256 %s, checked against: %s)", path, size, digest, against)
        return DownloadResult(path, digest, size, True, against)
    finally:
        if tmp.exists():
            tmp.unlink()


def amazon2023_cache_dir(base: str | os.PathLike[str] | None = None) -> Path:
    """``<cache>/amazon2023`` (``base`` or :func:`~shopping_companion.paths.cache_dir`)."""
    return Path(base) if base is not None else cache_dir() / "amazon2023"


def fetch_amazon2023(
    category: str,
    kind: Kind,
    *,
    cache: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    revision: str | None = None,
    progress: bool = True,
    expected_sha256: str | None = None,
) -> DownloadResult:
    """Download (or reuse) one category file of the release into ``<cache>/<Category>/``.

    ``kind``: ``"meta"`` (``meta_<Category>.jsonl``) or ``"reviews"`` (``<Category>.jsonl``).
    ``expected_sha256`` defaults to :data:`KNOWN_SHA256` for the file. See :func:`download_file`
    for caching, checksums and errors.
    """
    repo_path = amazon2023_repo_path(kind, category)
    dest = amazon2023_cache_dir(cache) / category / Path(repo_path).name
    want = expected_sha256 or KNOWN_SHA256.get(repo_path)
    return download_file(
        amazon2023_url(kind, category, endpoint, revision), dest, expected_sha256=want, progress=progress
    )


__all__ = [
    "DEFAULT_CATEGORY",
    "DownloadError",
    "DownloadResult",
    "KNOWN_SHA256",
    "amazon2023_repo_path",
    "amazon2023_url",
    "download_file",
    "fetch_amazon2023",
    "file_sha256",
    "hf_endpoint",
    "verify_cached",
]
