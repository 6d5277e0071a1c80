"""``with obj:`` for the objects that hold a resource released by ``close()`` (an HTTP pool, a
cache database, a Lucene reader)."""

from __future__ import annotations

from typing import Self

__all__ = ["Closeable"]


class Closeable:
    """Mixin: ``with obj:`` gives ``obj`` and calls ``obj.close()`` on leaving the block, also when
    it raises (exceptions are not suppressed). Subclasses implement :meth:`close`."""

    def close(self) -> None:
        """Release the resource; subclasses override it (idempotent there)."""
        raise NotImplementedError(f"{type(self).__name__}.close")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
