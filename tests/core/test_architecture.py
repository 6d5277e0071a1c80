"""The package keeps its layers (docs/architecture.md, layers; the table is
``shopping_companion/layers.py``).

The import graph is read from the source with :mod:`ast`: every ``import`` and ``from ... import``
of a ``shopping_companion`` module, at module level, inside functions and under
``if TYPE_CHECKING`` alike, relative imports resolved (``from . import x`` names the module ``x``
when it is one). The tests fail on

- an import cycle between modules (naming its files and the names that tie them);
- an import from a package to one in a higher layer, or to a peer of its layer, other than the
  protocol leaves of ``layers.PROTOCOL_LEAVES`` by the packages named there;
- a name with a leading ``_`` imported from another package;
- a module of a package no layer names, a shim that does more than re-export or that code of the
  package imports, and a docs/architecture.md table that is not ``layers_markdown()``;
- a module over :data:`MAX_MODULE_LINES` lines (the data tables of :data:`DATA_TABLES` aside), a
  ``cli/`` module over :data:`MAX_CLI_LINES`, a function or method over :data:`MAX_FUNCTION_LINES`.

The last tests run the same checks on a tiny package written to ``tmp_path`` with a cycle, an
upward import and a private import, and with a long module, a long ``cli/`` module and a long
function, and assert each is reported.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from shopping_companion import layers

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


# --------------------------------------------------------------------------- the graph


@dataclass(frozen=True)
class Import:
    """``importer`` imports ``names`` from ``target`` (dotted module names) at ``line``."""

    importer: str
    target: str
    names: tuple[str, ...]
    line: int


def module_files(root: Path, package: str) -> dict[str, Path]:
    """``{dotted module name: file}`` of every ``.py`` file of ``root/package``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(root: Path, package: str) -> tuple[dict[str, Path], list[Import]]:
    """The modules of ``root/package`` and every import of one of them by another (see the module
    docstring). A dotted name that is not a module resolves to its longest prefix that is one."""
    modules = module_files(root, package)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    imports: list[Import] = []
    for module, path in modules.items():
        here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = resolve(alias.name) if alias.name.split(".")[0] == package else None
                    if target and target != module:
                        imports.append(Import(module, target, (), node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source.split(".")[0] != package:
                    continue
                by_target: dict[str, list[str]] = {}
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    target = sub if sub in modules else resolve(source)
                    if target and target != module:
                        by_target.setdefault(target, []).append(alias.name)
                for target, names in by_target.items():
                    imports.append(Import(module, target, tuple(names), node.lineno))
    return modules, imports


# --------------------------------------------------------------------------- the checks


def find_cycles(modules: Iterable[str], imports: Iterable[Import]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan), each
    sorted, the list sorted."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        edges.setdefault(imp.importer, set()).add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def describe_cycle(cycle: list[str], files: Mapping[str, Path], imports: Iterable[Import], root: Path) -> str:
    """A cycle's files and, for each import inside it, ``a.py -> b.py: names``."""
    members = set(cycle)

    def rel(m: str) -> str:
        return str(files[m].relative_to(root)) if m in files else m

    ties = sorted(
        {
            f"  {rel(i.importer)} -> {rel(i.target)}: {', '.join(i.names) or '(module)'}"
            for i in imports
            if i.importer in members and i.target in members
        }
    )
    return "cycle of " + ", ".join(rel(m) for m in cycle) + ":\n" + "\n".join(ties)


def upward_imports(
    imports: Iterable[Import],
    package_of: Callable[[str], str],
    layer_of: Callable[[str], int],
    leaves: Mapping[str, tuple[tuple[str, ...], tuple[str, ...], str]],
    skip: Iterable[str] = (),
) -> list[Import]:
    """Imports from one package to another that is not in a lower layer, except a protocol leaf
    (``leaves``: ``module without the root package -> (allowed importer packages, what it imports,
    why)``) by a
    package it names; importers in ``skip`` (dotted, without the root package) are left out."""
    skipped = set(skip)
    out = []
    for imp in imports:
        a, b = package_of(imp.importer), package_of(imp.target)
        if a == b or imp.importer.split(".", 1)[-1] in skipped:
            continue
        if layer_of(a) > layer_of(b):
            continue
        allowed = leaves.get(imp.target.split(".", 1)[-1])
        if allowed and a in allowed[0]:
            continue
        out.append(imp)
    return out


def private_imports(imports: Iterable[Import], package_of: Callable[[str], str]) -> list[tuple[Import, str]]:
    """``(import, name)`` for each name with a leading ``_`` (not a ``__dunder__``) imported from
    another package."""
    out = []
    for imp in imports:
        if package_of(imp.importer) == package_of(imp.target):
            continue
        for name in imp.names:
            if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                out.append((imp, name))
    return out


def long_modules(files: Mapping[str, Path], limit: int, exempt: Iterable[str] = ()) -> list[tuple[str, int]]:
    """``(module, lines)`` of each module in ``files`` longer than ``limit`` lines, except those
    in ``exempt`` (dotted names), longest first."""
    skip = set(exempt)
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in files.items() if m not in skip}
    return sorted(((m, n) for m, n in sizes.items() if n > limit), key=lambda x: (-x[1], x[0]))


def long_functions(files: Mapping[str, Path], limit: int) -> list[tuple[str, int]]:
    """``("module:line name", lines)`` of each function or method (nested ones too) in ``files``
    longer than ``limit`` lines, decorators excluded, longest first."""
    out = []
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > limit:
                    out.append((f"{module}:{node.lineno} {node.name}", n))
    return sorted(out, key=lambda x: (-x[1], x[0]))


def _line(imp: Import, files: Mapping[str, Path], root: Path) -> str:
    return (
        f"{files[imp.importer].relative_to(root)}:{imp.line} imports {', '.join(imp.names) or 'the module'} "
        f"from {files[imp.target].relative_to(root)}"
    )


# --------------------------------------------------------------------------- this package

FILES, IMPORTS = import_graph(ROOT, "shopping_companion")
SHIMS = {f"shopping_companion.{m}" for m in layers.SHIMS}

#: Longest module, ``cli/`` module and function (lines, blank lines and docstrings included).
MAX_MODULE_LINES, MAX_CLI_LINES, MAX_FUNCTION_LINES = 1000, 300, 150
#: Modules that are data tables (phrasing banks), not logic: exempt from the module limit.
DATA_TABLES = ("shopping_companion.benchmark.templates",)


def test_the_graph_is_read():
    """A guard against a reader that finds nothing: known imports of each kind are in the graph."""
    ties = {(i.importer, i.target) for i in IMPORTS}
    assert len(FILES) > 150 and len(IMPORTS) > 500
    assert ("shopping_companion.benchmark.run", "shopping_companion.benchmark.kit") in ties  # module level
    assert ("shopping_companion.assembly.judging", "shopping_companion.judges.cascade") in ties  # in a function
    assert ("shopping_companion.trainers.launch", "shopping_companion.assembly.reward_spec") in ties  # TYPE_CHECKING


def test_no_import_cycles():
    cycles = find_cycles(FILES, IMPORTS)
    assert not cycles, "import cycles:\n" + "\n".join(describe_cycle(c, FILES, IMPORTS, ROOT) for c in cycles)


def test_every_package_has_a_layer():
    missing = sorted(
        {layers.package_of(m) for m in FILES if m not in SHIMS}
        - {p for _name, packages, _what in layers.LAYERS for p in packages}
    )
    assert not missing, f"packages in no layer of shopping_companion/layers.py: {missing}"


def test_no_imports_up_the_layers():
    bad = upward_imports(IMPORTS, layers.package_of, layers.layer_of, layers.PROTOCOL_LEAVES, skip=layers.SHIMS)
    assert not bad, (
        "imports from a lower layer to a higher one (or between peers of a layer); move the code down or "
        "the import up (docs/architecture.md, layers):\n" + "\n".join(_line(i, FILES, ROOT) for i in bad)
    )


def test_protocol_leaves_stay_leaves():
    """A protocol leaf imports only the modules ``layers.PROTOCOL_LEAVES`` lets it."""
    for leaf, (_importers, may_import, _why) in layers.PROTOCOL_LEAVES.items():
        module = f"shopping_companion.{leaf}"
        allowed = tuple(f"shopping_companion.{m}" for m in may_import)
        bad = [i for i in IMPORTS if i.importer == module and not i.target.startswith(allowed)]
        assert not bad, f"{leaf} is a protocol leaf and imports only {', '.join(may_import)}: " + "; ".join(
            _line(i, FILES, ROOT) for i in bad
        )


def test_no_private_names_across_packages():
    bad = private_imports(IMPORTS, layers.package_of)
    assert not bad, "private names imported from another package (make them public where they are shared):\n" + (
        "\n".join(f"{_line(i, FILES, ROOT)}: {name}" for i, name in bad)
    )


def test_shims_only_re_export_and_nothing_inside_imports_them():
    for shim in sorted(SHIMS):
        assert shim in FILES, f"layers.SHIMS names {shim}, which is not a module"
        tree = ast.parse(FILES[shim].read_text(encoding="utf-8"))
        for node in tree.body:
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            all_ = isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]
            assert docstring or all_ or isinstance(node, ast.ImportFrom), (
                f"{FILES[shim].relative_to(ROOT)}:{node.lineno}: a shim only re-exports (docstring, imports, __all__)"
            )
    users = [i for i in IMPORTS if i.target in SHIMS]
    assert not users, "code inside the package imports an old path; import the new home:\n" + "\n".join(
        _line(i, FILES, ROOT) for i in users
    )


def test_shims_hand_on_the_new_homes_objects():
    import importlib

    for shim in sorted(SHIMS):
        mod = importlib.import_module(shim)
        homes = [
            importlib.import_module(f"shopping_companion.{m.strip()}")
            for m in layers.SHIMS[shim.split(".", 1)[1]].split(",")
        ]
        for name in mod.__all__:
            assert any(getattr(home, name, None) is getattr(mod, name) for home in homes), (
                f"{shim}.{name} is not the object of its new home ({layers.SHIMS[shim.split('.', 1)[1]]})"
            )


def test_the_docs_show_the_layers_of_layers_py():
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    want = layers.layers_markdown()
    assert want in section, (
        "the table in docs/architecture.md, Layers, is not the one of shopping_companion/layers.py; "
        f"replace it with the output of `python -m shopping_companion.layers`:\n{want}"
    )
    assert "pytest -q tests/core/test_architecture.py" in section
    assert "There is no import cycle between modules" not in text or not find_cycles(FILES, IMPORTS)


_ROUND_NAME = re.compile(r"(issue|round|finding|review)s?_?\d|_\d+\.py$")


def misplaced_tests(tests: Path, package: Path) -> list[str]:
    """Test files (``test_*.py``) of ``tests`` that break docs/architecture.md, Tests: outside
    ``tests/<package>/``, ``tests/core/``, ``tests/scripts/`` and ``tests/extras/<stack>/``, or
    named after an issue or a review round. Each entry: the path relative to ``tests``, a colon,
    why."""
    homes = {p.name for p in package.iterdir() if (p / "__init__.py").is_file()} | {"core", "scripts"}
    out = []
    for f in sorted(tests.rglob("test_*.py")):
        rel = f.relative_to(tests)
        parts = rel.parts
        placed = (len(parts) == 2 and parts[0] in homes) or (len(parts) == 3 and parts[0] == "extras")
        if not placed:
            out.append(f"{rel.as_posix()}: not in tests/<package>/, core/, scripts/ or extras/<stack>/")
        elif _ROUND_NAME.search(f.name):
            out.append(f"{rel.as_posix()}: named after an issue or a review round")
    return out


def test_tests_mirror_the_package():
    bad = misplaced_tests(ROOT / "tests", ROOT / "shopping_companion")
    assert not bad, "test files that break docs/architecture.md, Tests:\n" + "\n".join(bad)


def test_no_module_over_the_line_limit():
    assert all(m in FILES for m in DATA_TABLES), f"DATA_TABLES names a module that is not there: {DATA_TABLES}"
    long = long_modules(FILES, MAX_MODULE_LINES, DATA_TABLES)
    assert not long, f"modules over {MAX_MODULE_LINES} lines; split them along their seams:\n" + "\n".join(
        f"  {m}: {n}" for m, n in long
    )


def test_no_cli_module_over_the_line_limit():
    cli = {m: p for m, p in FILES.items() if m.startswith("shopping_companion.cli.")}
    long = long_modules(cli, MAX_CLI_LINES)
    assert not long, (
        f"cli/ modules over {MAX_CLI_LINES} lines; a command module parses, calls and prints (move the work "
        "down, or a command group into its own module):\n" + "\n".join(f"  {m}: {n}" for m, n in long)
    )


def test_no_function_over_the_line_limit():
    long = long_functions(FILES, MAX_FUNCTION_LINES)
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines; split them into named steps:\n" + "\n".join(
        f"  {f}: {n}" for f, n in long
    )


# --------------------------------------------------------------------------- the checks can fail


def test_the_checks_report_a_cycle_an_upward_and_a_private_import(tmp_path):
    pkg = tmp_path / "toy"
    (pkg / "low").mkdir(parents=True)
    (pkg / "high").mkdir()
    for d in (pkg, pkg / "low", pkg / "high"):
        (d / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("from toy.low import b\n\n\ndef f():\n    from toy.high.c import C\n")
    (pkg / "low" / "b.py").write_text("from . import a\n")
    (pkg / "low" / "z.py").write_text("_hidden = 1\n")
    (pkg / "high" / "c.py").write_text("from toy.low.z import _hidden\n\nC = 1\n")
    files, imports = import_graph(tmp_path, "toy")
    layer = {"high": 1, "low": 0}

    def package_of(m: str) -> str:
        return layers.package_of(m)

    assert find_cycles(files, imports) == [["toy.low.a", "toy.low.b"]]
    text = describe_cycle(["toy.low.a", "toy.low.b"], files, imports, tmp_path)
    assert "toy/low/a.py -> toy/low/b.py" in text and "toy/low/b.py -> toy/low/a.py: a" in text
    up = upward_imports(imports, package_of, layer.__getitem__, {})
    assert [(i.importer, i.target, i.names) for i in up] == [("toy.low.a", "toy.high.c", ("C",))]
    assert upward_imports(imports, package_of, layer.__getitem__, {"high.c": (("low",), (), "a protocol leaf")}) == []
    assert [(i.importer, n) for i, n in private_imports(imports, package_of)] == [("toy.high.c", "_hidden")]


def test_the_test_layout_check_reports_misplaced_and_round_named_files(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "catalog").mkdir(parents=True)
    (pkg / "catalog" / "__init__.py").write_text("")
    tests = tmp_path / "tests"
    for rel in [
        "catalog/test_cache.py",
        "core/test_runs.py",
        "scripts/test_run_grpo.py",
        "extras/rl/test_trl.py",
        "unit/test_x.py",
        "test_top.py",
        "catalog/test_break_findings_14.py",
        "core/test_issue32_defects.py",
        "extras/rl/deep/test_y.py",
    ]:
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text("")
    assert [b.split(":")[0] for b in misplaced_tests(tests, pkg)] == [
        "catalog/test_break_findings_14.py",
        "core/test_issue32_defects.py",
        "extras/rl/deep/test_y.py",
        "test_top.py",
        "unit/test_x.py",
    ]


def test_the_size_checks_report_a_long_module_cli_module_and_function(tmp_path):
    pkg = tmp_path / "toy"
    (pkg / "cli").mkdir(parents=True)
    for d in (pkg, pkg / "cli"):
        (d / "__init__.py").write_text("")
    (pkg / "big.py").write_text("X = 1\n" * 20)
    (pkg / "table.py").write_text("X = 1\n" * 20)
    (pkg / "cli" / "cmd.py").write_text("X = 1\n" * 6)
    body = "".join(f"        x{i} = {i}\n" for i in range(8))
    (pkg / "fn.py").write_text(f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body}")
    files = module_files(tmp_path, "toy")
    assert long_modules(files, 15, ("toy.table",)) == [("toy.big", 20)]  # fn.py has 14 lines
    cli = {m: p for m, p in files.items() if m.startswith("toy.cli.")}
    assert long_modules(cli, 5) == [("toy.cli.cmd", 6)]
    assert long_functions(files, 8) == [("toy.fn:6 long", 9)]
    assert long_functions(files, 9) == []
