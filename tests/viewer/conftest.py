"""Fixtures of the integration tests beyond tests/conftest.py's: the viewer's real runs, built once
per test session (tests/viewer/viewer_runs.py)."""

from tests.viewer.viewer_runs import viewer_runs  # noqa: F401  (a session fixture, registered by import)
