"""``Closeable``: ``with obj:`` gives the object and closes it on exit, also on an exception."""

import pytest

from shopping_companion.resources import Closeable


class _Pool(Closeable):
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_with_yields_self_and_closes_once() -> None:
    pool = _Pool()
    with pool as got:
        assert got is pool
        assert pool.closed == 0
    assert pool.closed == 1


def test_closes_on_exception_and_does_not_suppress_it() -> None:
    pool = _Pool()
    with pytest.raises(RuntimeError, match="boom"):
        with pool:
            raise RuntimeError("boom")
    assert pool.closed == 1


def test_close_must_be_implemented() -> None:
    with pytest.raises(NotImplementedError, match="Closeable.close"):
        with Closeable():
            pass
