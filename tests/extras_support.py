"""What every optional stack's suite under ``tests/extras/<name>/`` shares: :func:`require_modules`,
the import check its test modules call first, and :func:`shared_benchmark`, a synthesised benchmark
built once for the suites of a run."""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest


def require_modules(install: str, *modules: str) -> None:
    """Import ``modules`` or skip the calling test module; under ``SHOPCOMP_REQUIRE_EXTRAS=1``
    (scripts/test.sh and CI set it) FAIL instead. ``install``: how to get them, for the message
    (e.g. ``"scripts/install_rl.sh and use .venv-rl"``)."""
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError as e:
            if os.environ.get("SHOPCOMP_REQUIRE_EXTRAS") == "1":
                pytest.fail(f"{m} is required (SHOPCOMP_REQUIRE_EXTRAS=1) but cannot be imported: {e}")
            pytest.skip(f"{m} not installed (run {install})")


def shared_benchmark(request: pytest.FixtureRequest, n_tasks: int, seed: int, **config: Any) -> tuple[Any, Path]:
    """``synth_bench(n_tasks, seed, **config)`` (tests/conftest.py) written once into the session's
    cache directory, which every suite of a ``scripts/test.sh`` run shares
    (``$SHOPCOMP_TEST_SHARED_DIR``): the suites that ask for the same benchmark (tests/extras/agents
    and tests/extras/inspect) synthesise it once and the others load it (``load_benchmark``, its
    files' hashes checked) without parsing the catalog. Keyed by the arguments, the package's
    source and the data files' sizes and times, so a changed synthesis never reuses a stale one;
    built under a file lock (suites in lanes side by side). Returns (the benchmark: ``.tasks``,
    ``.sessions``; its directory)."""
    from shopping_companion.assembly.data import load_benchmark
    from shopping_companion.benchmark.synth import write_benchmark

    data_dir = request.getfixturevalue("data_dir")
    h = hashlib.sha256(json.dumps([n_tasks, seed, config], sort_keys=True, default=str).encode())
    package = Path(__file__).resolve().parents[1] / "shopping_companion"
    for f in sorted(package.rglob("*.py")):
        h.update(f.relative_to(package).as_posix().encode() + b"\0" + f.read_bytes())
    for f in sorted(p for p in Path(data_dir).rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(data_dir)}:{st.st_size}:{st.st_mtime_ns}".encode())
    root = request.getfixturevalue("shopcomp_cache_dir") / "test-benchmarks"
    root.mkdir(parents=True, exist_ok=True)
    d = root / f"synth-{n_tasks}-{seed}-{h.hexdigest()[:16]}"
    with open(root / f"{d.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
        if not (d / "manifest.json").is_file():  # the manifest is written last: absent = not complete
            bench = request.getfixturevalue("synth_bench")(n_tasks, seed, **config)
            write_benchmark(bench, d)
            return bench, d
    return load_benchmark(d), d
