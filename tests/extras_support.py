"""What every optional stack's suite under ``tests/extras/<name>/`` shares: :func:`require_modules`,
the import check its test modules call first."""

from __future__ import annotations

import importlib
import os

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
