"""The layers of the package, written once (docs/architecture.md, layers).

:data:`LAYERS` lists them top down; each names the packages (a sub-package or a top-level module
of ``shopping_companion``) that stand on it. A module imports only modules of its own package or
of packages in layers BELOW its own; packages that share a layer do not import each other.
:data:`PROTOCOL_LEAVES` are the only modules a lower layer may import from above, each with the
packages allowed to and why; :data:`SHIMS` are old import paths kept for users, which only
re-export and which nothing inside the package imports. No name with a leading ``_`` is imported
across packages.

``tests/core/test_architecture.py`` builds the import graph of the package from its source (every
``import``, function-local ones included) and holds it to these rules and to no import cycle at
all; it also checks that the table in docs/architecture.md is :func:`layers_markdown` (print it
with ``python -m shopping_companion.layers``). Imports nothing.
"""

from __future__ import annotations

__all__ = ["LAYERS", "PROTOCOL_LEAVES", "SHIMS", "layer_of", "layers_markdown", "package_of"]

#: ``(layer, packages, what they hold)``, top down.
LAYERS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("commands", ("cli",), "one module per command group: parse, call, print"),
    ("integrations", ("integrations",), "adapters to verifiers, skyrl-gym and Inspect AI"),
    ("applications", ("viewer", "train_pipeline"), "the run viewer; benchmark → SFT → GRPO → evaluation → report"),
    ("training", ("sft", "trainers"), "rejection sampling and SFT export; GRPO on verl and TRL"),
    ("evaluation", ("benchmark",), "synthesis and import of tasks, the eval's kit, the run, reports"),
    ("services", ("serve", "personalization"), "the tool service (Ray Serve); the personalization benchmark"),
    ("assembly", ("assembly",), "data, endpoints, the judge, the reward spec, shared settings, the Ray cluster"),
    ("environment", ("envs", "memory"), "the environment and user simulators; per-user memory stores"),
    ("domain", ("rewards", "catalog"), "rewards and rubrics; products, the BM25 index, ProductSearch"),
    ("judges", ("judges",), "the Judge protocol, Acc / Succ, the value matcher, rule and LLM judges"),
    (
        "foundations",
        ("llm", "config", "registry", "runs", "paths"),
        "chat backends; the config loader; registries; run files; data and cache paths",
    ),
    ("policies", ("retry", "tool_args"), "the one retry policy of HTTP callers; the tools' argument limits"),
    (
        "base",
        ("types", "errors", "console", "resources", "phases", "layers", "sentences", "markdown", "__init__"),
        "shared models, the error tree, the stderr console, Markdown tables, small leaves",
    ),
)

#: Modules of a higher layer that lower packages may import:
#: ``module -> (the packages that may import it, the only modules it imports, why)``.
PROTOCOL_LEAVES: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "envs.tools": (
        ("judges", "rewards", "llm"),
        ("types", "errors", "tool_args", "llm.base"),
        "the tool names and argument models are the protocol every layer speaks",
    ),
    "envs.parsing": (
        ("judges", "rewards", "llm"),
        ("types", "errors", "llm.base", "envs.answers", "envs.protocol_values"),
        "the action parser reads a turn for the judges, the format reward and the reference policy",
    ),
    "envs.answers": (
        ("judges", "rewards", "llm"),
        ("types", "envs.protocol_values"),
        "the stage answers (recommended ids, stated preferences) the parser and the judges read",
    ),
    "envs.protocol_values": (
        ("judges", "rewards", "llm"),
        (),
        "text cleaning and the strict JSON decoder of the protocol",
    ),
}

#: Old import paths kept for users (scripts, plug-ins, docs): ``module -> where the names live``.
SHIMS: dict[str, str] = {
    "pipeline": "assembly.data, assembly.judging",
    "rewards.spec": "assembly.reward_spec, assembly.judging",
}


def package_of(module: str) -> str:
    """The package of a dotted module name inside ``shopping_companion`` (``shopping_companion.envs.env``
    -> ``envs``, ``shopping_companion.runs`` -> ``runs``, ``shopping_companion`` -> ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(package: str) -> int:
    """The layer number of ``package`` (0 = the bottom layer). Raises ``KeyError`` for a package
    no layer names."""
    for i, (_name, packages, _what) in enumerate(reversed(LAYERS)):
        if package in packages:
            return i
    raise KeyError(f"package {package!r} is in no layer of shopping_companion/layers.py")


def layers_markdown() -> str:
    """The layers as the Markdown table docs/architecture.md shows (top layer first)."""
    rows = ["| layer | packages | what they hold |", "|---|---|---|"]
    for name, packages, what in LAYERS:
        names = ", ".join(f"`{p}/`" if p not in _MODULES else f"`{p}.py`" for p in packages if p != "__init__")
        rows.append(f"| {name} | {names} | {what} |")
    return "\n".join(rows) + "\n"


#: packages that are one module (``<name>.py``), for :func:`layers_markdown`
_MODULES = frozenset(
    {
        "config",
        "registry",
        "runs",
        "paths",
        "types",
        "errors",
        "console",
        "resources",
        "phases",
        "retry",
        "tool_args",
        "layers",
        "sentences",
        "markdown",
    }
)


if __name__ == "__main__":
    print(layers_markdown(), end="")
