"""Fixtures for the Inspect AI extra (inspect-ai 0.3.285): run in ``.venv-inspect`` with
``.venv-inspect/bin/python -m pytest -q tests/extras/inspect`` (``scripts/install_inspect.sh``
builds it). A test module calls :func:`require` first: it skips when Inspect is missing, and
FAILS when ``SHOPCOMP_REQUIRE_EXTRAS=1`` (CI sets it).

Inspect writes its logs and keeps its own state under the test's temporary directories (never
``~/.inspect_ai`` or ``./logs``): :func:`inspect_home` sets ``INSPECT_LOG_DIR`` and the
platform directories for this session.
"""

from __future__ import annotations


import pytest

from tests.extras_support import require_modules


def require(*modules: str) -> None:
    """Import ``modules`` or skip (fail under ``SHOPCOMP_REQUIRE_EXTRAS=1``): :func:`~tests.extras_support.require_modules`."""
    require_modules("scripts/install_inspect.sh and use .venv-inspect", *modules)


@pytest.fixture(scope="session", autouse=True)
def inspect_home(tmp_path_factory):
    """Inspect's log directory and data / cache directories for this session."""
    home = tmp_path_factory.mktemp("inspect-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("INSPECT_LOG_DIR", str(home / "logs"))
    mp.setenv("XDG_DATA_HOME", str(home / "data"))
    mp.setenv("XDG_CACHE_HOME", str(home / "cache"))
    mp.setenv("INSPECT_DISPLAY", "none")
    mp.setenv("OPENAI_API_KEY", "test-key")
    yield home
    mp.undo()
