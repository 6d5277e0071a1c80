"""docs/architecture.md and the example configs stay true to the code.

- every "docs/architecture.md, <section>" a docstring or doc cites is a section of the document;
- every name in its "Where each concept lives" table is defined in the module of its row (so a
  concept that moves, or is implemented again elsewhere, shows up here);
- configs/eval/example.yaml and configs/quickstart.yaml load through the one config loader and
  spell out the defaults of EvalConfig and QuickstartConfig.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from shopping_companion.benchmark.run_config import EvalConfig, QuickstartConfig
from shopping_companion.config import load_model

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PKG = ROOT / "shopping_companion"


def _sections() -> set[str]:
    return {m.group(1).strip().lower() for m in re.finditer(r"^#{2,3} (.+)$", DOC.read_text(encoding="utf-8"), re.M)}


def _citing_files() -> list[Path]:
    return sorted(PKG.rglob("*.py")) + sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def test_every_cited_section_exists():
    sections = _sections()
    cited: dict[str, list[str]] = {}
    for f in _citing_files():
        text = re.sub(r"\s+", " ", f.read_text(encoding="utf-8"))
        for m in re.finditer(r"docs/architecture\.md, ([^).;:\"`]+)", text):
            name = m.group(1).split(",")[0].strip().lower()
            cited.setdefault(name, []).append(str(f.relative_to(ROOT)))
    assert cited, "no docstring cites docs/architecture.md"
    missing = {name: files for name, files in cited.items() if name not in sections}
    assert not missing, f"cited sections missing from {DOC.name}: {missing}; sections: {sorted(sections)}"


def _concept_rows() -> list[tuple[str, str, list[str]]]:
    text = DOC.read_text(encoding="utf-8")
    body = text.split("## Where each concept lives", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("concept", "---") or set(cells[0]) <= {"-"}:
            continue
        module = re.findall(r"`([^`]+)`", cells[1])
        names = re.findall(r"`([^`]+)`", cells[2])
        assert len(module) == 1 and names, f"row {line!r}: one module and at least one name expected"
        rows.append((cells[0], module[0], names))
    return rows


def _defines(source: str, name: str) -> bool:
    n = re.escape(name)
    patterns = (
        rf"^\s*(?:async\s+)?def {n}\b",  # a function or method
        rf"^\s*class {n}\b",  # a class
        rf"^{n}\s*(?::[^=\n]+)?=",  # a module-level constant
        rf"""@reward\(["']{n}["']""",  # a registered reward function
    )
    return any(re.search(p, source, re.M) for p in patterns)


def test_concept_table_matches_the_code():
    rows = _concept_rows()
    assert len(rows) >= 25
    problems = []
    for concept, module, names in rows:
        path = PKG / module
        files = sorted(path.rglob("*.py")) if module.endswith("/") else [path]
        if not all(f.is_file() for f in files) or not files:
            problems.append(f"{concept}: {module} does not exist")
            continue
        source = "\n".join(f.read_text(encoding="utf-8") for f in files)
        problems += [f"{concept}: {name} is not defined in {module}" for name in names if not _defines(source, name)]
    assert not problems, "\n".join(problems)


def _missing_keys(model: type[BaseModel], data: dict, prefix: str = "") -> list[str]:
    out = []
    for key, field in model.model_fields.items():
        if key not in data:
            out.append(prefix + key)
        elif (
            isinstance(field.annotation, type)
            and issubclass(field.annotation, BaseModel)
            and isinstance(data[key], dict)
        ):
            out += _missing_keys(field.annotation, data[key], prefix + key + ".")
    return out


def test_eval_example_spells_out_every_group_with_its_defaults():
    path = ROOT / "configs" / "eval" / "example.yaml"
    cfg = load_model(EvalConfig, path)
    assert cfg == EvalConfig.model_validate(
        {"bench": {"path": str(cfg.bench.path)}, "output": {"name": cfg.output.name}}
    )
    # mode / hint come from the strategies, simulator / simulator_seed from simulator and seed
    assert _missing_keys(EvalConfig, yaml.safe_load(path.read_text(encoding="utf-8"))) == [
        "env.mode",
        "env.hint",
        "env.simulator",
        "env.simulator_seed",
    ]


def test_eval_example_takes_flags_and_sets_over_the_file():
    cfg = load_model(
        EvalConfig,
        ROOT / "configs" / "eval" / "example.yaml",
        ["backend.sampling.temperature=0.7"],
        {"backend.kind": "openai", "backend.model": "Qwen/Qwen3-4B-Thinking-2507"},
    )
    assert (cfg.backend.kind, cfg.backend.model, cfg.backend.sampling.temperature) == (
        "openai",
        "Qwen/Qwen3-4B-Thinking-2507",
        0.7,
    )


def test_quickstart_config_is_the_quickstart_defaults():
    cfg = load_model(QuickstartConfig, ROOT / "configs" / "quickstart.yaml")
    default = QuickstartConfig()
    assert cfg.synth == default.synth
    assert cfg.eval_config() == default.eval_config()
    assert (cfg.name, cfg.runs_dir, cfg.sharegpt, cfg.data) == (
        default.name,
        default.runs_dir,
        default.sharegpt,
        default.data,
    )


def test_eval_example_with_an_unknown_key_is_refused_naming_it(tmp_path):
    from shopping_companion.errors import ConfigError

    bad = tmp_path / "example.yaml"
    bad.write_text(
        (ROOT / "configs" / "eval" / "example.yaml").read_text(encoding="utf-8") + "\nbackend_kind: openai\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="backend_kind: unknown field"):
        load_model(EvalConfig, bad)
