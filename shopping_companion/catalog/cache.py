"""The catalog parsed once per process, and cached on disk for the next process.

:func:`load_catalog` is the one way the commands read a whole catalog (the index build, synthesis,
the reference policy's vocabulary, ``import-tasks``): parsing 98,729 products with attribute
extraction costs about a minute on two cores, so

* **in the process** the parsed ``(products, report)`` is kept, keyed by the catalog file (its
  resolved path and the key below) and the parse settings (the format as resolved, so ``"auto"``
  and ``"products"`` share one entry, the field mapping, the Amazon category as resolved from the
  file name when not given, ``extract``). Every caller gets the same list: treat it as read-only.
* **on disk** it is kept in ``<cache dir>/catalogs/`` (:func:`~shopping_companion.paths.cache_dir`,
  ``$SHOPCOMP_CACHE_DIR``), the way the BM25 index and the MiniLM encodings are, one file per
  catalog path and settings, under a key of the file's content hash
  (:func:`~shopping_companion.catalog.sources.source_hash`, which carries the loader versions), the
  parse settings, a fingerprint of the code that decides the parse (the loader, source mappings,
  extractor and value matcher with its vocabularies), the ``Product`` schema and the Python and
  pydantic versions. Hashing the file (12 MB: tens of milliseconds) on every call means a
  rewritten catalog is never served from either cache.

The cache file is a header line (JSON: format version, key, payload length and SHA-256) followed
by a pickle of the products and the load report. A file whose header, key, length or checksum does
not match is stale or corrupt: it is parsed again and rewritten, never trusted. Writers write a
temporary file in the same directory and ``os.replace`` it, so a concurrent reader sees the old
file or the new one, never a torn one. Only the user's own cache directory is read (a pickle runs
code when loaded; do not point ``$SHOPCOMP_CACHE_DIR`` at files others can write).
``$SHOPCOMP_CATALOG_CACHE=0`` turns the disk cache off (the in-process one stays).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import sys
import tempfile
import threading
from collections import OrderedDict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from shopping_companion.catalog.loader import LoadReport
from shopping_companion.types import Product

log = logging.getLogger(__name__)

#: Bump when the layout of a cache file changes (2: products written :func:`share_equal_values`).
CACHE_FORMAT_VERSION = 2
_MAGIC = b"shopcomp-catalog-cache\n"
#: The JSON header line after the magic: padded with spaces to this many bytes, newline included.
_HEADER_BYTES = 1024
#: Set to 0 to read and write no cache file (the catalog is then parsed once per process).
ENV_DISK_CACHE = "SHOPCOMP_CATALOG_CACHE"
#: How many parsed catalogs a process keeps (the quickstart uses one).
MEMORY_ENTRIES = 2

_PKG = Path(__file__).resolve().parent.parent
#: The code whose behaviour decides the parsed products (part of the disk key).
_PARSE_CODE = ("catalog/loader.py", "catalog/sources.py", "catalog/extract.py", "judges/matching")

_lock = threading.RLock()
_memory: OrderedDict[tuple, tuple[list[Product], LoadReport]] = OrderedDict()
_fingerprint: str | None = None


def load_catalog(
    path: str | os.PathLike[str],
    format: str = "auto",
    mapping: Any = None,
    category: str | None = None,
    extract: bool = True,
    *,
    disk_cache: bool | None = None,
) -> tuple[list[Product], LoadReport]:
    """``(products, report)`` of a catalog file, as
    :func:`~shopping_companion.catalog.sources.load_catalog_file` returns them, parsed at most once
    per process and read from the disk cache when an earlier process parsed the same content
    (module docstring). ``disk_cache``: None follows ``$SHOPCOMP_CATALOG_CACHE`` (on unless ``0``).
    The list is shared by every caller: do not change it or its products. Raises what
    :func:`~shopping_companion.catalog.sources.load_catalog_file` raises."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"catalog file {str(p)!r} does not exist")
    fmt, category, settings = _settings(p, format, mapping, category, extract)
    key = _key(p, fmt, mapping, category, settings)  # hashes the file: a rewrite is never a stale hit
    mkey = (str(p.resolve()), key)
    with _lock:  # one parse even when threads ask at once
        hit = _memory.get(mkey)
        if hit is not None:
            _memory.move_to_end(mkey)
            return hit
        if disk_cache is None:
            disk_cache = os.environ.get(ENV_DISK_CACHE, "1").strip() not in ("0", "false", "no")
        got = _from_disk_or_parse(p, fmt, mapping, category, extract, settings, key if disk_cache else None)
        _memory[mkey] = got
        while len(_memory) > MEMORY_ENTRIES:
            _memory.popitem(last=False)
        return got


def _settings(p: Path, format: str, mapping: Any, category: str | None, extract: bool) -> tuple[str, str | None, tuple]:
    """``(format, category, settings)`` of a read of ``p``: the format as resolved, the category
    as the loader uses it (:func:`_category`) and the parse settings that are part of the disk key
    and name the cache file (:func:`_cache_path`)."""
    from shopping_companion.catalog.sources import _mapping_json, resolve_format

    fmt = resolve_format(p, format, mapping)
    category = _category(p, fmt, category)
    return fmt, category, (fmt, _mapping_json(mapping), category or "", bool(extract))


def _category(p: Path, fmt: str, category: str | None) -> str | None:
    """The Amazon category the loader uses (given, else from the file name, as
    :func:`~shopping_companion.catalog.sources.iter_amazon2023` does), so that a caller naming it
    and one leaving it out share one parse; None for formats that do not use it."""
    from shopping_companion.catalog.sources import amazon2018_category, amazon2023_category

    if fmt == "amazon2023":
        return category or amazon2023_category(p) or "unknown"
    if fmt == "amazon2018":
        return category or amazon2018_category(p) or "unknown"
    return None


def clear_memory_cache(path: str | os.PathLike[str] | None = None) -> None:
    """Forget the catalogs parsed in this process, or only those of the file ``path`` (the disk
    cache stays)."""
    with _lock:
        if path is None:
            _memory.clear()
            return
        where = str(Path(path).resolve())
        for k in [k for k in _memory if k[0] == where]:
            del _memory[k]


def cache_file(
    path: str | os.PathLike[str],
    format: str = "auto",
    mapping: Any = None,
    category: str | None = None,
    extract: bool = True,
) -> Path:
    """The disk-cache file of a catalog file read with these settings (it may not exist)."""
    p = Path(path)
    return _cache_path(p, _settings(p, format, mapping, category, extract)[2])


def _cache_path(p: Path, settings: tuple) -> Path:
    from shopping_companion.paths import cache_dir

    where = hashlib.sha256(json.dumps([str(p.resolve()), *settings]).encode()).hexdigest()[:16]
    return cache_dir() / "catalogs" / f"{p.name}-{where}.pkl"


def code_fingerprint() -> str:
    """SHA-256 over the source of the modules and data files that decide the parsed products
    (:data:`_PARSE_CODE`), the ``Product`` schema and the Python and pydantic versions."""
    global _fingerprint
    if _fingerprint is None:
        import pydantic

        h = hashlib.sha256()
        for rel in _PARSE_CODE:
            base = _PKG / rel
            files = (
                sorted(f for f in base.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
                if base.is_dir()
                else [base]
            )
            for f in files:
                h.update(f.relative_to(_PKG).as_posix().encode() + b"\0")
                h.update(f.read_bytes())
                h.update(b"\0")
        h.update(json.dumps(Product.model_json_schema(), sort_keys=True).encode())
        h.update(f"python {sys.version_info[:2]} pydantic {pydantic.VERSION}".encode())
        _fingerprint = h.hexdigest()
    return _fingerprint


def _key(p: Path, fmt: str, mapping: Any, category: str | None, settings: tuple) -> str:
    """SHA-256 (hex) of what decides the parsed products: content hash, settings, code."""
    from shopping_companion.catalog.sources import source_hash

    body = {"source": source_hash(p, fmt, mapping, category), "settings": list(settings), "code": code_fingerprint()}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _from_disk_or_parse(
    p: Path, fmt: str, mapping: Any, category: str | None, extract: bool, settings: tuple, key: str | None
) -> tuple[list[Product], LoadReport]:
    """Read the disk cache (``key`` None: no disk cache), else parse and write it; either way
    the products come back :func:`share_equal_values`: a parse shares them before the file is
    written, and pickle keeps one copy of an object several products refer to, so a read gets
    them shared without a second pass (and never allocates the duplicates)."""
    from shopping_companion.catalog.sources import load_catalog_file

    target = None
    if key is not None:
        target = _cache_path(p, settings)
        got = _read(target, key)
        if got is not None:
            products, report = got
            report.path = str(p)
            log.info("%s (from the cache %s)", report.summary(), target)
            if report.bad:  # the warning a parse logs, once per process as before
                log.warning("%s (first examples: %s)", report.summary(), report.examples[:3])
            return products, report
    products, report = load_catalog_file(p, fmt, mapping, category, extract=extract)
    log.info("%s", report.summary())
    share_equal_values(products)
    if target is not None and key is not None:
        _write(target, key, products, report)
    return products, report


#: Values up to this many characters are shared between products (longer ones rarely repeat).
_SHARED_VALUE_CHARS = 64
_STR_FIELDS = ("source", "shop", "shop_id", "seller", "brand", "currency")


def share_equal_values(products: list[Product]) -> None:
    """Let equal values of the products be one object, in place: the set of explicitly given
    field names (pydantic keeps one per model; the catalog has two or three distinct ones), the
    shop, source and brand strings, category names, attribute and option keys and short values,
    and the provenance's field names and extractor. Values stay equal, so the products compare,
    dump and hash as before. Measured on the full catalog: the field-name sets alone take 224 MB
    unshared; read back from a cache file written shared, the products take 0.30 GB instead of
    0.78 GB and load in 1.2 s instead of 2.6 s. The products must
    be read-only from here on (an assignment would add its field to the shared set of names;
    nothing assigns after loading)."""
    import gc

    names: dict[frozenset[str], set[str]] = {}
    strs: dict[str, str] = {}
    share = strs.setdefault
    set_attr = object.__setattr__

    def short(v: str) -> str:
        return share(v, v) if len(v) <= _SHARED_VALUE_CHARS else v

    gc_was_enabled = gc.isenabled()
    gc.disable()  # new containers for objects that all stay alive
    try:
        for p in products:
            fs = p.__pydantic_fields_set__
            set_attr(p, "__pydantic_fields_set__", names.setdefault(frozenset(fs), fs))
            d = p.__dict__
            for name in _STR_FIELDS:
                v = d[name]
                if v is not None:
                    d[name] = share(v, v)
            if d["category_path"]:
                d["category_path"] = [share(c, c) for c in d["category_path"]]
            if d["attributes"]:
                d["attributes"] = {share(k, k): short(v) for k, v in d["attributes"].items()}
            if d["options"]:
                d["options"] = {share(k, k): [short(v) for v in vs] for k, vs in d["options"].items()}
            if d["attribute_sources"]:
                sources = {}
                for k, src in d["attribute_sources"].items():
                    sfs = src.__pydantic_fields_set__
                    set_attr(src, "__pydantic_fields_set__", names.setdefault(frozenset(sfs), sfs))
                    sd = src.__dict__
                    sd["source"] = share(sd["source"], sd["source"])
                    sd["extractor"] = share(sd["extractor"], sd["extractor"])
                    sources[share(k, k)] = src
                d["attribute_sources"] = sources
    finally:
        if gc_was_enabled:
            gc.enable()


def _read(target: Path, key: str) -> tuple[list[Product], LoadReport] | None:
    """The cached products, or None when the file is missing, stale or corrupt (logged)."""
    import gc

    try:
        fh = open(target, "rb")
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("catalog cache %s unreadable (%s); parsing the catalog", target, e)
        return None
    with fh:
        try:
            if fh.read(len(_MAGIC)) != _MAGIC:
                raise ValueError("not a catalog cache file")
            line = fh.read(_HEADER_BYTES)
            if len(line) != _HEADER_BYTES or not line.endswith(b"\n"):
                raise ValueError("truncated header")
            header = json.loads(line)
            if header.get("version") != CACHE_FORMAT_VERSION or header.get("key") != key:
                log.info("catalog cache %s is stale (another catalog, settings or code); parsing again", target)
                return None
            start, size = fh.tell(), int(header["payload_bytes"])
            h = hashlib.sha256()
            n = 0
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
                n += len(chunk)
            if n != size or h.hexdigest() != header["payload_sha256"]:
                raise ValueError(f"payload of {n} bytes does not match its header ({size} bytes, checksum)")
            fh.seek(start)
            gc_was_enabled = gc.isenabled()
            gc.disable()  # ~100k objects that all stay alive: no point scanning them while loading
            try:
                payload = pickle.load(fh)
            finally:
                if gc_was_enabled:
                    gc.enable()
            products, rep = payload["products"], LoadReport(**payload["report"])
            if (
                not isinstance(products, list)
                or len(products) != rep.n_loaded
                or (products and not isinstance(products[0], Product))
            ):
                raise ValueError("payload is not the products of its report")
            rep.examples = [tuple(x) for x in rep.examples]
            return products, rep
        except Exception as e:  # noqa: BLE001 - any damage means: parse again, never trust it
            log.warning("catalog cache %s is corrupt (%s); parsing the catalog again", target, str(e)[:200])
            return None


class _HashingWriter:
    """A binary file wrapper that counts and hashes what is written through it."""

    def __init__(self, fh: Any) -> None:
        self.fh, self.h, self.n = fh, hashlib.sha256(), 0

    def write(self, b: Any) -> int:
        self.h.update(b)
        self.n += len(b)
        return self.fh.write(b)


def _write(target: Path, key: str, products: list[Product], report: LoadReport) -> None:
    """Write the cache file atomically (temporary file + ``os.replace``); failures are logged.
    The pickle streams to the file (no copy of it in memory) through a hash; the header, padded
    to a fixed size, is written last in front of it."""
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as out:
            out.write(_MAGIC + b" " * (_HEADER_BYTES - 1) + b"\n")
            w = _HashingWriter(out)
            pickler = pickle.Pickler(w, protocol=5)
            # with its memo (not ``fast``), pickle writes an object several products share once
            # and a read gets it back shared: 94 MB instead of 135 MB, loaded in about half the
            # time and 0.3 GB instead of 0.8 GB in memory (the memo costs about 3 s and 0.2 GB
            # while writing, once per parse)
            pickler.dump({"products": products, "report": asdict(report)})
            header = json.dumps(
                {
                    "version": CACHE_FORMAT_VERSION,
                    "key": key,
                    "payload_bytes": w.n,
                    "payload_sha256": w.h.hexdigest(),
                    "products": len(products),
                },
                sort_keys=True,
            ).encode()
            if len(header) >= _HEADER_BYTES:
                raise OSError(f"cache header of {len(header)} bytes is longer than {_HEADER_BYTES - 1}")
            out.seek(len(_MAGIC))
            out.write(header.ljust(_HEADER_BYTES - 1) + b"\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
        tmp = None
    except Exception as e:  # noqa: BLE001 - a cache that cannot be written only costs the next process a parse
        log.warning("could not write the catalog cache %s (%s); the next process parses the catalog again", target, e)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


__all__ = [
    "CACHE_FORMAT_VERSION",
    "cache_file",
    "clear_memory_cache",
    "code_fingerprint",
    "load_catalog",
    "share_equal_values",
]
