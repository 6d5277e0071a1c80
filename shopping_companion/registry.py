"""Named registries for plug-ins: rewards, judges, user simulators, chat backends (docs/architecture.md, plug-ins).

A :class:`Registry` maps names to objects (functions, classes, factories). An object is found by

1. its **registered name** (``@REWARDS.register("outcome")``);
2. a **dotted path** ``"package.module:attr"`` (``attr`` may itself be dotted, ``"mod:Class.method"``),
   imported on demand — any importable object works without registering it;
3. a Python **entry point** in the registry's group (e.g. ``shopping_companion.rewards``), so an
   installed third-party package can add names::

       # the plug-in's pyproject.toml
       [project.entry-points."shopping_companion.rewards"]
       my_bonus = "my_pkg.rewards:my_bonus"

Lookup order is exactly the list above (a registered name shadows an entry point of the same name).
A name that resolves nowhere raises :class:`UnknownNameError` (a :class:`ConfigError`), whose message
lists every known name and explains the dotted-path form.

Built-in objects are registered by modules of the package when they are imported; each registry
imports its ``builtin_modules`` lazily on first lookup, so ``REWARDS.get("outcome")`` works without
importing :mod:`shopping_companion.rewards` first, and importing this module stays cheap.

Registries of the package (entry-point groups in parentheses):

- :data:`REWARDS` (``shopping_companion.rewards``): reward functions ``fn(ctx) -> float | dict``
  (:mod:`shopping_companion.rewards.rubric`);
- :data:`JUDGES` (``shopping_companion.judges``): judge classes (``rule``, ``llm``);
- :data:`SIMULATORS` (``shopping_companion.simulators``): user simulators;
- :data:`BACKENDS` (``shopping_companion.backends``): chat backends.
"""

from __future__ import annotations

import importlib
import importlib.metadata as importlib_metadata
import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar, overload

from shopping_companion.errors import ConfigError
from shopping_companion.errors import UnknownNameError  # noqa: F401 - re-exported

__all__ = ["BACKENDS", "JUDGES", "REWARDS", "SIMULATORS", "Registry", "UnknownNameError", "load_object"]

T = TypeVar("T")


def load_object(path: str) -> Any:
    """Import ``"package.module:attr[.attr…]"`` and return the object.

    Raises :class:`ConfigError` naming the path when the form is wrong, the module cannot be
    imported, or the attribute does not exist (with the module's public names as a hint).
    """
    if path.count(":") != 1:
        raise ConfigError(f"{path!r}: a dotted path must have the form 'package.module:attr'")
    mod_name, attr = (s.strip() for s in path.split(":"))
    if not mod_name or not attr:
        raise ConfigError(f"{path!r}: a dotted path must have the form 'package.module:attr'")
    try:
        obj: Any = importlib.import_module(mod_name)
    except Exception as e:  # ImportError, or the module's own code failing (SyntaxError, RuntimeError, ...)
        raise ConfigError(f"{path!r}: cannot import module {mod_name!r} ({type(e).__name__}: {e})") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            public = sorted(n for n in dir(obj) if not n.startswith("_"))
            hint = ", ".join(public[:30]) + (" …" if len(public) > 30 else "")
            raise ConfigError(f"{path!r}: {part!r} not found (available: {hint or 'nothing'})") from None
    return obj


class Registry(Generic[T]):
    """Names → objects of one kind, with ``module:attr`` paths and entry points.

    Args:
        kind: what the registry holds, used in messages (``"reward"``).
        group: the entry-point group searched by :meth:`get` and :meth:`names`.
        builtin_modules: modules imported (once, lazily) before the first lookup; they register
            the built-in names. More can be added with :meth:`add_builtin_module`.

    Thread-safe: registration and the lazy built-in import hold a lock.
    """

    def __init__(self, kind: str, group: str, builtin_modules: Iterable[str] = ()) -> None:
        self.kind = kind
        self.group = group
        self._items: dict[str, T] = {}
        self._builtin_modules: list[str] = list(builtin_modules)
        self._imported: set[str] = set()
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ registration
    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, obj: T, *, replace: bool = ...) -> T: ...

    def register(self, name: str, obj: Any = None, *, replace: bool = False) -> Any:
        """Register ``obj`` under ``name``; without ``obj``, return a decorator doing so.

        ``name`` must be non-empty and contain no ``:`` (that form is a dotted path). Registering a
        taken name raises :class:`ConfigError` unless ``replace=True``.
        """
        if not isinstance(name, str) or not name.strip() or ":" in name:
            raise ConfigError(f"{self.kind} name {name!r}: must be a non-empty string without ':'")

        def deco(o: T) -> T:
            with self._lock:
                if name in self._items and not replace and self._items[name] is not o:
                    raise ConfigError(
                        f"{self.kind} {name!r} is already registered ({self._items[name]!r}); "
                        "pass replace=True to override it"
                    )
                self._items[name] = o
            return o

        return deco if obj is None else deco(obj)

    def unregister(self, name: str) -> None:
        """Remove a registered name (no error when absent)."""
        with self._lock:
            self._items.pop(name, None)

    def add_builtin_module(self, module: str) -> None:
        """Import ``module`` lazily before the next lookup (it registers built-in names)."""
        with self._lock:
            if module not in self._builtin_modules:
                self._builtin_modules.append(module)

    def _load_builtins(self) -> None:
        with self._lock:
            for m in self._builtin_modules:
                if m not in self._imported:
                    self._imported.add(m)
                    importlib.import_module(m)

    # ------------------------------------------------------------------ lookup
    def entry_points(self) -> dict[str, importlib_metadata.EntryPoint]:
        """Entry points of :attr:`group` currently installed (discovered on every call)."""
        return {ep.name: ep for ep in importlib_metadata.entry_points(group=self.group)}

    def registered(self) -> dict[str, T]:
        """A copy of the registered names (built-ins included), without entry points."""
        self._load_builtins()
        with self._lock:
            return dict(self._items)

    def names(self) -> list[str]:
        """Every known name: registered ones and entry points, sorted."""
        return sorted(set(self.registered()) | set(self.entry_points()))

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return name in self.registered() or name in self.entry_points()

    def get(self, ref: str | T) -> T:
        """Resolve a registered name, a ``module:attr`` path or an entry-point name.

        A non-string ``ref`` is returned unchanged (an object passed directly). Raises
        :class:`UnknownNameError` listing the known names when nothing matches, or
        :class:`ConfigError` when a dotted path or an entry point fails to load.
        """
        if not isinstance(ref, str):
            return ref
        name = ref.strip()
        if ":" in name:
            return load_object(name)
        items = self.registered()
        if name in items:
            return items[name]
        eps = self.entry_points()
        if name in eps:
            try:
                return eps[name].load()
            except Exception as e:
                raise ConfigError(
                    f"{self.kind} {name!r}: entry point {eps[name].value!r} of group {self.group!r} "
                    f"failed to load ({type(e).__name__}: {e})"
                ) from e
        known = sorted(set(items) | set(eps))
        raise UnknownNameError(
            f"unknown {self.kind} {name!r}; known: {', '.join(known) or '(none)'}. "
            f"Use a registered name, a dotted path 'package.module:attr', or install an entry point "
            f"in group {self.group!r}"
        )

    def __repr__(self) -> str:
        return f"Registry(kind={self.kind!r}, group={self.group!r}, registered={sorted(self._items)})"


#: Reward functions (:mod:`shopping_companion.rewards.rubric`): ``fn(ctx) -> float | dict[str, float]``.
REWARDS: Registry[Any] = Registry("reward", "shopping_companion.rewards", ["shopping_companion.rewards.builtin"])
#: Judge classes: ``rule`` (:class:`~shopping_companion.judges.rule.RuleJudge`), ``llm``.
JUDGES: Registry[Any] = Registry(
    "judge", "shopping_companion.judges", ["shopping_companion.judges.rule", "shopping_companion.judges.llm"]
)
#: User simulators (registered by :mod:`shopping_companion.envs.simulator`: ``scripted``, ``llm``).
SIMULATORS: Registry[Any] = Registry(
    "user simulator", "shopping_companion.simulators", ["shopping_companion.envs.simulator"]
)
#: Chat backends (the llm package registers its backends here; ``BACKENDS.add_builtin_module(...)``
#: makes a module's registrations available to name lookups without importing it first).
BACKENDS: Registry[Any] = Registry("backend", "shopping_companion.backends")
