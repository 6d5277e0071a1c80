"""Integrity of the matching lexicons (shopping_companion/judges/matching/data).

Loads the YAML files with pyyaml only (not through the matcher) and checks: the schema (only known
fields), versions, that every vocabulary keys.yaml names exists, that no alias belongs to two keys,
that no surface form belongs to two concepts of one vocabulary, that ``broader`` / ``contains``
references exist and ``broader`` forms no cycle, and that the real Myntra values of the main keys
resolve to concepts (coverage, read from ../shared/data when present, skipped otherwise).
"""

from __future__ import annotations

import gzip
import json
import re
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).resolve().parents[2] / "shopping_companion" / "judges" / "matching" / "data"
CATALOG_CANDIDATES = [
    Path(__file__).resolve().parents[2].parent / "shared" / "data" / "catalog" / "products.jsonl.gz",
    Path("/work/shared/data/catalog/products.jsonl.gz"),
]

KEY_FIELDS = {"aliases", "secondary", "vocabulary", "multi_valued", "kind", "dimension", "unit"}
KINDS = {"category", "quantity", "text"}
DIMENSIONS = {"length", "mass", "volume", "information", "time", "dimensionless", "currency"}
VOCAB_FIELDS = {"version", "vocabulary", "modifiers", "concepts"}
CONCEPT_FIELDS = {"forms", "broader", "contains", "group"}


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (a silently overwritten concept is a bug)."""


def _construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping_orig(node, deep=deep)


_UniqueKeyLoader.construct_mapping_orig = yaml.SafeLoader.construct_mapping  # type: ignore[attr-defined]
_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _load(path: Path):
    with path.open(encoding="utf-8") as f:
        return yaml.load(f, Loader=_UniqueKeyLoader)


def norm(text: str) -> str:
    """Small local normaliser: lowercase, accents removed, ``-`` ``_`` ``/`` as spaces, spaces collapsed."""
    t = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode().lower()
    t = re.sub(r"[-_/]", " ", t)
    return re.sub(r"\s+", " ", t).strip()


def _singular(word: str) -> str:
    # tokens with digits are model names or sizes ("6s", "s7", "5s"), never plurals
    if (
        len(word) <= 3
        or any(ch.isdigit() for ch in word)
        or not word.endswith("s")
        or word.endswith(("ss", "us", "is"))
    ):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    return word[:-1]


def norm_strict(text: str) -> str:
    """``norm`` plus simple plural -> singular per word (what the matcher's normaliser also does)."""
    return " ".join(_singular(w) for w in norm(text).split())


def alias_name(a) -> str:
    return a["name"] if isinstance(a, dict) else a


@pytest.fixture(scope="module")
def keys():
    return _load(DATA / "keys.yaml")


@pytest.fixture(scope="module")
def vocabularies():
    out = {}
    for p in sorted((DATA / "values").glob("*.yaml")):
        out[p.stem] = _load(p)
    out["product_type"] = _load(DATA / "product_types.yaml")
    return out


# --------------------------------------------------------------------------- schema


def test_keys_schema(keys):
    assert set(keys) == {"version", "keys"}
    assert isinstance(keys["version"], int) and keys["version"] >= 1
    for name, d in keys["keys"].items():
        assert isinstance(name, str) and name == norm(name), name
        assert set(d) <= KEY_FIELDS, (name, set(d) - KEY_FIELDS)
        assert d.get("kind") in KINDS, name
        assert isinstance(d.get("aliases"), list) and d["aliases"], name
        for a in d["aliases"] + d.get("secondary", []):
            if isinstance(a, dict):
                assert set(a) <= {"name", "unit"} and isinstance(a["name"], str), (name, a)
            else:
                assert isinstance(a, str) and a.strip(), (name, a)
        if "multi_valued" in d:
            assert isinstance(d["multi_valued"], bool), name
        if d["kind"] == "quantity":
            dims = d.get("dimension")
            dims = dims if isinstance(dims, list) else [dims]
            assert dims and all(x in DIMENSIONS for x in dims), (name, dims)
            assert "unit" in d, name
        else:
            assert "dimension" not in d and "unit" not in d, name
        # a key's own name resolves to it
        assert name in {norm(alias_name(a)) for a in d["aliases"]}, name


def test_vocabulary_schema(vocabularies):
    for stem, v in vocabularies.items():
        assert set(v) <= VOCAB_FIELDS and {"version", "vocabulary", "concepts"} <= set(v), stem
        assert isinstance(v["version"], int) and v["version"] >= 1, stem
        assert v["vocabulary"] == stem, (stem, v["vocabulary"])
        assert isinstance(v.get("modifiers", []), list), stem
        assert all(isinstance(m, str) and m.strip() for m in v.get("modifiers", [])), stem
        assert v["concepts"], stem
        for cname, c in v["concepts"].items():
            assert isinstance(c, dict) and set(c) <= CONCEPT_FIELDS, (stem, cname)
            assert isinstance(c.get("forms"), list) and c["forms"], (stem, cname)
            assert all(isinstance(f, str) and f.strip() for f in c["forms"]), (stem, cname)
            for field in ("broader", "contains"):
                assert isinstance(c.get(field, []), list), (stem, cname, field)
            assert isinstance(c.get("group", False), bool), (stem, cname)


def test_referenced_vocabularies_exist(keys):
    for name, d in keys["keys"].items():
        voc = d.get("vocabulary")
        if voc is not None:
            assert (DATA / "values" / f"{voc}.yaml").exists(), (name, voc)


def test_every_vocabulary_is_used(keys, vocabularies):
    used = {d.get("vocabulary") for d in keys["keys"].values()}
    assert set(vocabularies) - used - {"product_type"} == set()


# --------------------------------------------------------------------------- uniqueness


def test_no_alias_under_two_keys(keys):
    owner: dict[str, str] = {}
    for name, d in keys["keys"].items():
        for a in d["aliases"] + d.get("secondary", []):
            n = norm_strict(alias_name(a))
            assert owner.setdefault(n, name) == name, f"{alias_name(a)!r} under {owner[n]!r} and {name!r}"


def compact(text: str) -> str:
    """Joined form ("crew neck" and "crewneck" are one form for the matcher)."""
    return "".join(norm_strict(text).split())


def test_no_form_under_two_concepts(vocabularies):
    problems = []
    for stem, v in vocabularies.items():
        owner: dict[str, str] = {}
        for cname, c in v["concepts"].items():
            for f in [cname, *c["forms"]]:
                n = compact(f)
                if owner.setdefault(n, cname) != cname:
                    problems.append(f"{stem}: {f!r} in {owner[n]!r} and {cname!r}")
    assert not problems, "\n".join(problems)


def test_forms_survive_modifier_removal(vocabularies):
    """Removing a vocabulary's modifier words from a form leaves nothing, the form itself, or another
    form of the same concept (the matcher may strip modifiers before looking a value up)."""
    problems = []
    for stem, v in vocabularies.items():
        mods = {w for m in v.get("modifiers", []) for w in norm_strict(m).split()}
        owner = {compact(f): cname for cname, c in v["concepts"].items() for f in [cname, *c["forms"]]}
        for cname, c in v["concepts"].items():
            for f in [cname, *c["forms"]]:
                words = norm_strict(f).split()
                kept = [w for w in words if w not in mods]
                if kept and kept != words and owner.get("".join(kept)) != cname:
                    problems.append(
                        f"{stem}: {f!r} of {cname!r} reads as {' '.join(kept)!r} "
                        f"({owner.get(''.join(kept))!r}) without modifiers"
                    )
    assert not problems, "\n".join(problems)


def test_forms_are_not_modifiers(vocabularies):
    """A form made only of modifier words would vanish when modifiers are ignored."""
    for stem, v in vocabularies.items():
        mods = {norm_strict(m) for m in v.get("modifiers", [])}
        for cname, c in v["concepts"].items():
            for f in c["forms"]:
                assert norm_strict(f) not in mods, (stem, cname, f)


# --------------------------------------------------------------------------- relations


def test_broader_references_exist_and_are_acyclic(vocabularies):
    for stem, v in vocabularies.items():
        concepts = v["concepts"]
        for cname, c in concepts.items():
            for field in ("broader", "contains"):
                for b in c.get(field, []):
                    assert b in concepts, (stem, cname, field, b)
                    assert b != cname, (stem, cname, field)
        state: dict[str, int] = {}

        def visit(n: str, path: tuple[str, ...]) -> None:
            if state.get(n) == 2:
                return
            assert state.get(n) != 1, f"{stem}: cycle {' -> '.join(path + (n,))}"
            state[n] = 1
            for b in concepts[n].get("broader", []):
                visit(b, path + (n,))
            state[n] = 2

        for cname in concepts:
            visit(cname, ())


# --------------------------------------------------------------------------- coverage on the real catalog

COVERAGE_KEYS = ["base_colour", "Fabric", "Neck", "Sleeve Length", "Fit", "Pattern"]
ABSENT_VALUES = {"na", "n a", "", "none"}


def _catalog_path():
    return next((p for p in CATALOG_CANDIDATES if p.exists()), None)


def _resolver(keys, vocabularies):
    alias_to_key = {}
    for name, d in keys["keys"].items():
        for a in d["aliases"] + d.get("secondary", []):
            alias_to_key[norm_strict(alias_name(a))] = name
    form_index = {}
    for stem, v in vocabularies.items():
        mods = {norm_strict(m) for m in v.get("modifiers", [])}
        idx = {}
        for cname, c in v["concepts"].items():
            for f in [cname, *c["forms"]]:
                idx[compact(f)] = cname
        form_index[stem] = (idx, {w for m in mods for w in m.split()})

    def resolve(field: str, value: str):
        key = alias_to_key.get(norm_strict(field))
        voc = keys["keys"][key].get("vocabulary") if key else None
        if voc is None:
            return key, None
        idx, mods = form_index[voc]
        words = norm_strict(value).split()
        kept = [w for w in words if w not in mods] or words
        return key, idx.get("".join(words)) or idx.get("".join(kept))

    return resolve


@pytest.mark.skipif(_catalog_path() is None, reason="real catalog not available")
def test_myntra_value_coverage(keys, vocabularies):
    resolve = _resolver(keys, vocabularies)
    counts: dict[str, Counter] = {k: Counter() for k in COVERAGE_KEYS}
    with gzip.open(_catalog_path(), "rt", encoding="utf-8") as f:
        for line in f:
            p = json.loads(line)
            if p.get("source") != "myntra_styles":
                continue
            attrs = p.get("attributes") or {}
            for k in COVERAGE_KEYS:
                v = attrs.get(k)
                if v is not None and norm(str(v)) not in ABSENT_VALUES:
                    counts[k][str(v)] += 1
    report = []
    for k, c in counts.items():
        key, _ = resolve(k, "")
        assert key is not None, f"Myntra key {k!r} does not resolve to a canonical key"
        total = sum(c.values())
        ok = sum(n for v, n in c.items() if resolve(k, v)[1] is not None)
        missing = [v for v in c if resolve(k, v)[1] is None]
        report.append((k, ok / total, missing))
        assert ok / total >= 0.95, f"{k}: {ok}/{total} resolve; unresolved: {missing}"
