"""``shopcomp import-tasks``: per-line errors naming line and field, nothing written on error,
``--skip-invalid``, a real-catalog import that ``load_benchmark`` reads and a reference episode
runs on, the ``--sessions`` haystack with conflict swaps, the refusal to replace another
benchmark, and the schema in ``docs/tasks.md`` equal to the generated one.

Built on a small sample of the real catalog (the products the fixtures name, their shops, and a
few hundred other products) with its own BM25 index, and real SGD dialogues as the haystack."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shopping_companion.benchmark.import_tasks import ImportSettings, Importer, import_tasks, load_session_file
from shopping_companion.benchmark.task_schema import schema_in_doc, task_json_schema
from shopping_companion.errors import DataDirError, DataError

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "tests" / "fixtures" / "import_bad.jsonl"
HANDWRITTEN = REPO / "examples" / "tasks" / "handwritten.jsonl"
INDIRECT = REPO / "examples" / "tasks" / "indirect.jsonl"

SHIRT = "myntra_styles:19832"
JUMPSUIT = "myntra_styles:57811"
LEE_SHIRT, LEE_JEANS = "myntra_styles:11675", "myntra_styles:11339"


def _line(**kw) -> str:
    return json.dumps(kw)


def _shirt_task(task_id: str = "t-shirt", **kw) -> str:
    base = {
        "task_id": task_id,
        "task_type": "single",
        "instruction": "I need a shirt for the weekend. What would you pick for me?",
        "reference_product_ids": [SHIRT],
        "preferences": [{"attribute": "pattern", "value": "Checked"}, {"attribute": "fabric", "value": "Cotton"}],
        "dont_care": [{"attribute": "collar"}],
        "needle_sessions": [
            {
                "session_id": "mine-1",
                "turns": [
                    {"role": "user", "content": "Half my wardrobe is checked shirts and I am not stopping."},
                    {"role": "assistant", "content": "Checks are a classic."},
                    {"role": "user", "content": "Anything that isn't cotton makes me itch by noon."},
                ],
            }
        ],
    }
    base.update(kw)
    return json.dumps(base)


def _lee_deal(task_id: str = "t-lee", **kw) -> str:
    base = {
        "task_id": task_id,
        "task_type": "addon",
        "instruction": "The Lee store has a voucher: spend 3500, get 400 off. A shirt and jeans, at most 3700.",
        "reference_product_ids": [LEE_SHIRT, LEE_JEANS],
        "product_types": ["men's shirt", "pair of men's jeans"],
        "preferences": [
            {"slot": 0, "attribute": "colour", "value": "Red"},
            {"slot": 1, "attribute": "fit", "value": "Regular Fit"},
        ],
        "voucher": {"shop_id": "myntra-india/blumentor", "min_spend": 3500, "discount": 400},
        "budget": 3700,
        "needle_sessions": [
            {"turns": [{"role": "user", "content": "My colleagues say I only own red shirts. They are right."}]},
            {"turns": [{"role": "user", "content": "Skinny jeans hurt when I cycle, so regular fit only."}]},
        ],
    }
    base.update(kw)
    return json.dumps(base)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def real_data() -> Path:
    from shopping_companion.paths import resolve_data_dir

    try:
        d = resolve_data_dir()
    except DataDirError as e:
        pytest.skip(f"real data not available: {e}")
    if not (d / "catalog" / "products.jsonl.gz").is_file():
        pytest.skip("real data has no catalog/products.jsonl.gz")
    return d


def _wanted_ids(paths: list[Path]) -> set[str]:
    ids: set[str] = set()
    for p in paths:
        for raw in p.read_text(encoding="utf-8").splitlines():
            try:
                ids.update(json.loads(raw).get("reference_product_ids", []))
            except (ValueError, AttributeError):
                continue
    return ids


@pytest.fixture(scope="module")
def sample_catalog(real_data: Path, tmp_path_factory) -> Path:
    """A products.jsonl.gz of real records: every product the fixtures and the hand-written files
    name, every product of their brands, and 600 seeded-random others."""
    want = _wanted_ids([BAD, HANDWRITTEN, INDIRECT]) | {SHIRT, JUMPSUIT, LEE_SHIRT, LEE_JEANS}
    lines = []
    with gzip.open(real_data / "catalog" / "products.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = f.readlines()
    recs = [json.loads(x) for x in lines]
    brands = {(r.get("source"), r.get("brand")) for r in recs if r.get("uid") in want}
    rng = random.Random(11)
    keep = [
        x
        for x, r in zip(lines, recs)
        if r.get("uid") in want or (r.get("source"), r.get("brand")) in brands or rng.random() < 600 / len(lines)
    ]
    out = tmp_path_factory.mktemp("import-catalog") / "products.jsonl.gz"
    with gzip.open(out, "wt", encoding="utf-8") as f:
        f.writelines(keep)
    return out


@pytest.fixture(scope="module")
def products(sample_catalog: Path):
    from shopping_companion.catalog.loader import load_products

    return load_products(sample_catalog)[0]


@pytest.fixture(scope="module")
def index_dir(sample_catalog: Path, tmp_path_factory) -> Path:
    from shopping_companion.catalog.index import open_or_build

    d = tmp_path_factory.mktemp("import-index") / "idx"
    open_or_build(sample_catalog, d, threads=1)
    return d


@pytest.fixture(scope="module")
def search(index_dir: Path):
    from shopping_companion.catalog.search import ProductSearch

    return ProductSearch(index_dir)


@pytest.fixture(scope="module")
def pool(real_data: Path):
    from shopping_companion.memory.loaders import load_sgd

    return load_sgd(real_data / "conversations" / "sgd_dialogues.jsonl.gz")[:400]


@pytest.fixture(scope="module")
def importer(products, pool):
    return Importer(products, pool, ImportSettings(search=False, sessions_per_user=8))


def _run(importer, tmp_path: Path, text: str):
    f = tmp_path / "tasks.jsonl"
    f.write_text(text, encoding="utf-8")
    return importer.run(f)


# --------------------------------------------------------------------------- the schema page


def test_doc_schema_is_the_generated_schema():
    assert schema_in_doc(REPO / "docs" / "tasks.md") == task_json_schema()


def test_doc_example_lines_are_valid_inputs():
    from shopping_companion.benchmark.task_schema import TaskInput

    for raw in HANDWRITTEN.read_text(encoding="utf-8").splitlines() + INDIRECT.read_text(encoding="utf-8").splitlines():
        TaskInput.model_validate_json(raw)  # raises on a line that drifted from the schema


# --------------------------------------------------------------------------- errors


EXPECTED_BAD = {
    1: ("", "json"),
    2: ("preferences[0].polarity", "schema"),
    3: ("reference_product_ids[0]", "unknown_product"),
    4: ("preferences[0].attribute", "unknown_attribute"),
    5: ("preferences[0].value", "unsatisfied_preference"),
    6: ("preferences[1].value", "avoided_present"),
    7: ("budget", "budget_infeasible"),
    8: ("voucher.shop_id", "voucher_shop"),
    9: ("voucher.min_spend", "voucher_min_spend"),
    10: ("preferences[0].slot", "slot_out_of_range"),
    11: ("preferences[0]", "not_resolvable"),
    12: ("reference_product_ids", "slots"),
    13: ("task_id", "duplicate_task_id"),
    14: ("reference_product_ids", "slots"),
    15: ("reference_product_ids", "gold_rejected"),
}


def test_every_error_class_names_line_and_field(importer):
    reports, tasks, _ = importer.run(BAD)
    assert tasks == []
    by_line = {r.line: r for r in reports}
    assert sorted(by_line) == sorted(EXPECTED_BAD)
    for line, (fld, check) in EXPECTED_BAD.items():
        errs = by_line[line].errors
        assert any(i.field == fld and i.check == check for i in errs), (line, [i.text() for i in errs])
        for i in errs:
            text = i.text()
            assert text.startswith(f"line {line}") and (not i.field or i.field in text)
    # the schema error lists the allowed values and the unknown key the allowed fields
    schema = " ".join(i.message for i in by_line[2].errors)
    assert "'want' or 'avoid'" in schema and "got 'love'" in schema
    assert any(i.field == "colour_pref" and "allowed:" in i.message for i in by_line[2].errors)
    # the unsatisfied value quotes the field the judge read
    assert "base_colour='Brown'" in by_line[5].errors[0].message
    assert "3598 > budget 3000" in by_line[7].errors[0].message
    assert by_line[2].task_id == "bad-schema"


def test_file_with_errors_writes_nothing(products, pool, tmp_path):
    out = tmp_path / "bench"
    res = import_tasks(BAD, out, products, pool, ImportSettings(search=False, sessions_per_user=8))
    assert res.out is None and not res.ok and not out.exists()
    assert "line 1" in res.error_summary() and "--skip-invalid" in res.error_summary()


def test_open_task_needs_allow_open(importer, tmp_path):
    reports, tasks, _ = _run(importer, tmp_path, _shirt_task(reference_product_ids=[], product_types=["men's shirt"]))
    (err,) = reports[0].errors
    assert (err.field, err.check) == ("reference_product_ids", "slots") and "--allow-open" in err.message
    assert not tasks


def test_open_task_is_imported_and_judged_on_type_and_preferences(products, pool, search, tmp_path):
    from shopping_companion.benchmark.evaluate import EvalSettings, run_episode
    from shopping_companion.benchmark.synth import load_benchmark
    from shopping_companion.judges.rule import RuleJudge
    from shopping_companion.llm.reference import ReferencePolicy, build_attribute_vocabulary
    from shopping_companion.memory.store import MemoryStore
    from shopping_companion.pipeline import make_embedder
    from shopping_companion.rewards.rubric import load_rubric
    from shopping_companion.rewards.tool_wise import tool_call_scores, trajectory_tool_results

    settings = ImportSettings(search=False, sessions_per_user=8, allow_open=True)
    f = tmp_path / "open.jsonl"
    f.write_text(_shirt_task(reference_product_ids=[], product_types=["men's shirt"], dont_care=[]) + "\n")
    out = tmp_path / "bench"
    res = import_tasks(f, out, products, pool, settings)
    assert res.ok, res.error_summary()
    (task,) = load_benchmark(out).tasks
    assert task.is_open and task.reference_product_ids == [] and task.slots[0].reference_product_id is None
    v = task.verification
    assert v.gold_accepted is None and v.searchable is None and v.n_alternatives >= 1

    bench = load_benchmark(out)
    lookup = {p.product_id: p for p in products}
    judge = RuleJudge(lambda ids: {i: lookup[i] for i in ids if i in lookup})
    policy = ReferencePolicy(build_attribute_vocabulary(products))
    memory = MemoryStore.from_pool(bench.sessions, task.history, make_embedder())

    def find(ids):
        return {i: lookup[i] for i in ids if i in lookup}

    rubric = load_rubric("paper", resources={"lookup": find})  # as shopcomp eval builds it
    ep = run_episode(task, policy, search, memory, judge, EvalSettings(reward_fn=rubric))
    assert ep.error is None and not any(s.verdict.failed for s in ep.stages)
    # the product calls of an open task are scored by the matcher even with the exact-id rubric
    results = trajectory_tool_results(ep.stages[1].trajectory)
    scores, info = tool_call_scores(results, task, lookup=find)
    assert info["tool_semantic_calls"] > 0 and len(scores) == len(results)
    if ep.succ:  # a recommendation the judge accepts earns a positive product-call score
        assert max(scores) > 0


@pytest.mark.parametrize(
    ("kw", "fld", "check"),
    [
        ({"product_types": None}, "product_types", "open_task"),
        ({"task_type": "addon", "product_types": ["men's shirt", "belt"]}, "reference_product_ids", "open_task"),
        (
            {"product_types": ["men's shirt"], "preferences": [{"attribute": "zorbness", "value": "high"}]},
            "preferences[0].attribute",
            "unknown_attribute",
        ),
        ({"product_types": ["men's shirt"], "dont_care": [{"attribute": "collar"}]}, "dont_care[0].value", "dont_care"),
    ],
)
def test_open_task_errors(products, pool, tmp_path, kw, fld, check):
    imp = Importer(products, pool, ImportSettings(search=False, sessions_per_user=8, allow_open=True))
    reports, tasks, _ = _run(imp, tmp_path, _shirt_task(reference_product_ids=[], **kw))
    assert not tasks
    assert any(i.field == fld and i.check == check for i in reports[0].errors), [i.text() for i in reports[0].errors]


def test_open_task_nothing_satisfies(products, pool, tmp_path):
    imp = Importer(products, pool, ImportSettings(search=False, sessions_per_user=8, allow_open=True))
    prefs = [{"attribute": "pattern", "value": "Checked"}, {"attribute": "fabric", "value": "Cotton"}]
    text = _shirt_task(
        reference_product_ids=[], product_types=["pair of men's snow boots"], preferences=prefs, dont_care=[]
    )
    reports, tasks, _ = _run(imp, tmp_path, text)
    assert not tasks
    assert any(i.check == "open_task" and "no catalog product" in i.message for i in reports[0].errors)


def test_single_with_voucher_and_mixed_dates_are_refused(importer, tmp_path):
    voucher = {"shop_id": "x", "min_spend": 10, "discount": 1}
    needles = [
        {"date": "2023-05-01", "turns": [{"role": "user", "content": "I love checked shirts in cotton."}]},
        {"turns": [{"role": "user", "content": "Cotton only."}]},
    ]
    reports, _, _ = _run(importer, tmp_path, _shirt_task(voucher=voucher, needle_sessions=needles))
    fields = {(i.field, i.check) for i in reports[0].errors}
    assert ("voucher", "slots") in fields and ("needle_sessions", "dates") in fields


# --------------------------------------------------------------------------- success


def test_skip_invalid_writes_valid_tasks_and_lists_invalid(products, pool, tmp_path):
    f = tmp_path / "mixed.jsonl"
    f.write_text(
        "\n".join(
            [_shirt_task("ok-1"), "{broken", _lee_deal("ok-2"), _shirt_task("bad-2", reference_product_ids=["x:1"])]
        )
        + "\n"
    )
    settings = ImportSettings(search=False, sessions_per_user=8)
    out = tmp_path / "bench"
    res = import_tasks(f, out, products, pool, settings)
    assert res.out is None and not out.exists()
    res = import_tasks(f, out, products, pool, settings.model_copy(update={"skip_invalid": True}))
    assert res.out == out and [t.task_id for t in res.tasks] == ["ok-1", "ok-2"]
    report = json.loads((out / "import_report.json").read_text())
    assert [(t["line"], t["status"]) for t in report["tasks"]] == [
        (1, "imported"),
        (2, "invalid"),
        (3, "imported"),
        (4, "invalid"),
    ]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [x["line"] for x in manifest["verification"]["invalid_lines"]] == [2, 4]


def test_import_loads_and_a_reference_episode_runs(products, pool, search, tmp_path):
    from shopping_companion.benchmark.evaluate import EvalSettings, run_episode
    from shopping_companion.benchmark.synth import FORMAT_VERSION, load_benchmark
    from shopping_companion.judges.rule import RuleJudge
    from shopping_companion.llm.reference import ReferencePolicy, build_attribute_vocabulary
    from shopping_companion.memory.store import MemoryStore
    from shopping_companion.pipeline import make_embedder

    f = tmp_path / "tasks.jsonl"
    f.write_text(_shirt_task() + "\n" + _lee_deal() + "\n")
    out = tmp_path / "bench"
    settings = ImportSettings(sessions_per_user=8)
    res = import_tasks(f, out, products, pool, settings, searcher=search, sources={"test": True})
    assert res.ok and res.out == out

    bench = load_benchmark(out)  # checks the SHA-256 of every file and every referenced session
    m = bench.manifest
    assert m["format_version"] == FORMAT_VERSION and m["generator"]["kind"] == "import"
    assert m["generator"]["sha256"] and m["files"]["tasks.jsonl"]
    single, deal = bench.tasks
    assert single.dont_care[0].attribute == "collar" and single.dont_care[0].value == "Spread Collar"
    assert len(single.history) == 8 + 1 and single.needle_session_ids[0] in {r.session_id for r in single.history}
    dates = [r.date for r in single.history]
    assert dates == sorted(dates) and len(set(dates)) == len(dates)
    assert bench.sessions[single.needle_session_ids[0]].source == "import-needle:t-shirt:mine-1"
    v = single.verification
    assert v.resolvable and v.gold_accepted and v.conflict_free and v.searchable is not None
    assert v.search_queries == ["men's shirt Checked Cotton"] and len(v.search_ranks) == 1
    assert deal.verification.budget_slack == pytest.approx(3700 - (3998 - 400))
    assert deal.voucher.shop_id == "myntra-india/blumentor" and deal.currency == "INR"

    embedder = make_embedder()
    policy = ReferencePolicy(build_attribute_vocabulary(products))
    judge = RuleJudge(lambda ids: {p: search.get(p) for p in ids if search.get(p) is not None})
    for task in bench.tasks:
        memory = MemoryStore.from_pool(bench.sessions, task.history, embedder)
        ep = run_episode(task, policy, search, memory, judge, EvalSettings())
        assert ep.error is None and len(ep.stages) == 2, ep.error
        assert not any(s.verdict.failed for s in ep.stages)
        if task.task_type == "single":
            assert ep.stages[1].trajectory.recommended_ids  # stage 2 recommended something

    # rerunning the same import reproduces the files; another file into DIR is refused unless forced
    before = (out / "tasks.jsonl").read_bytes(), (out / "sessions.jsonl").read_bytes()
    import_tasks(f, out, products, pool, settings, searcher=search, sources={"test": True})
    assert ((out / "tasks.jsonl").read_bytes(), (out / "sessions.jsonl").read_bytes()) == before
    g = tmp_path / "other.jsonl"
    g.write_text(_shirt_task("t-other") + "\n")
    with pytest.raises(DataError, match="--force"):
        import_tasks(g, out, products, pool, settings, searcher=search)
    res = import_tasks(g, out, products, pool, settings, searcher=search, force=True)
    assert [t.task_id for t in load_benchmark(out).tasks] == ["t-other"]


def test_sessions_file_haystack_swaps_a_conflicting_session(products, tmp_path):
    sess = tmp_path / "sessions.jsonl"
    rows = []
    for i in range(12):
        rows.append(
            {
                "session_id": f"my-{i}",
                "turns": [
                    {"role": "user", "content": f"Can you help me plan a trip to city number {i} next spring?"},
                    {"role": "assistant", "content": "Sure, when would you like to travel?"},
                ],
            }
        )
    # a statement against the wanted colour: the detector must swap it out of the haystack
    rows[0]["turns"][0]["content"] = "I can't stand purple, honestly, never buy me purple clothes."
    sess.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pool = load_session_file(sess)
    assert len(pool) == 12 and pool[0].source == "import-sessions:sessions.jsonl"
    task = {
        "task_id": "t-jumpsuit",
        "task_type": "single",
        "instruction": "Find me a jumpsuit for a party.",
        "reference_product_ids": [JUMPSUIT],
        "preferences": [{"attribute": "colour", "value": "Purple"}],
        "dates": {"start": "2024-03-01"},
        "needle_sessions": [
            {"date": "2024-06-15", "turns": [{"role": "user", "content": "Every happy photo of me, I'm in purple."}]}
        ],
    }
    f = tmp_path / "tasks.jsonl"
    f.write_text(json.dumps(task) + "\n")
    res = import_tasks(f, tmp_path / "bench", products, pool, ImportSettings(search=False, sessions_per_user=11))
    assert res.ok, [i.text() for r in res.reports for i in r.issues]
    (t,) = res.tasks
    from shopping_companion.benchmark.synth import load_benchmark

    bench = load_benchmark(tmp_path / "bench")
    sources = {bench.sessions[r.session_id].source for r in t.history if r.session_id not in t.needle_session_ids}
    assert sources <= {f"my-{i}" for i in range(1, 12)} and len(sources) == 11  # my-0 swapped out
    assert [c.session_id for c in t.changes] == ["my-0"] and "purple" in t.changes[0].detail.lower()
    needle = next(r for r in t.history if r.session_id == t.needle_session_ids[0])
    assert needle.date == "2024-06-15" and t.history[0].date >= "2024-03-01"
    assert [r.date for r in t.history] == sorted(r.date for r in t.history)


def test_bad_sessions_file_names_line_and_field(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps({"session_id": "a", "turns": [{"role": "robot", "content": "hi"}]}) + "\n")
    with pytest.raises(DataError, match=r"line 1.*turns\.0\.role"):
        load_session_file(p)


def test_cli_exit_code_2_and_table_on_a_bad_file(sample_catalog, index_dir, tmp_path):
    from shopping_companion.cli import app

    sess = tmp_path / "s.jsonl"
    sess.write_text(
        "\n".join(
            json.dumps(
                {
                    "session_id": f"s{i}",
                    "turns": [{"role": "user", "content": f"hello {i}"}, {"role": "assistant", "content": "hi"}],
                }
            )
            for i in range(10)
        )
        + "\n"
    )
    out = tmp_path / "bench"
    args = ["import-tasks", str(BAD), "--out", str(out), "--catalog", str(sample_catalog), "--index", str(index_dir)]
    r = CliRunner().invoke(app, [*args, "--sessions", str(sess), "--sessions-per-user", "5"])
    assert r.exit_code == 2, r.output
    flat = " ".join(r.output.split())
    assert "line 3, reference_product_ids[0]: 'myntra_styles:does-not-exist' is not in" in flat
    assert "15 task line(s) are invalid" in flat and "[unknown_product]" in flat and not out.exists()
    f = tmp_path / "one.jsonl"
    f.write_text(_shirt_task() + "\n")
    args[1] = str(f)
    r = CliRunner().invoke(app, [*args, "--sessions", str(sess), "--sessions-per-user", "5"])
    assert r.exit_code == 0, r.output
    assert (out / "manifest.json").is_file() and "benchmark written to" in r.output


# --------------------------------------------------------------------------- evidence


def _without_evidence(text: str) -> str:
    rows = [json.loads(x) for x in text.splitlines() if x.strip()]
    for r in rows:
        for p in r["preferences"]:
            p.pop("evidence", None)
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def test_indirect_tasks_import_cleanly_with_evidence(products, pool, tmp_path):
    from shopping_companion.benchmark.synth import load_benchmark

    settings = ImportSettings(search=False, sessions_per_user=8)
    res = import_tasks(INDIRECT, tmp_path / "bench", products, pool, settings)
    assert res.ok and len(res.tasks) == 10, [i.text() for r in res.reports for i in r.errors]
    assert [r.status for r in res.reports] == ["imported"] * 10
    # the matcher reads few of these values: each of those it cannot is a warning naming the evidence
    warned = [i for r in res.reports for i in r.warnings if i.check == "not_resolvable"]
    n_prefs = sum(len(json.loads(x)["preferences"]) for x in INDIRECT.read_text().splitlines())
    assert len(warned) >= n_prefs // 2 and all("accepted on its evidence in needle" in i.message for i in warned)
    bench = load_benchmark(tmp_path / "bench")
    assert len(bench.tasks) == 10 and all(t.verification.gold_accepted for t in bench.tasks)
    by_ev = [p for t in bench.tasks for p in t.verification.accepted_by_evidence]
    assert len(by_ev) == len(warned) and all(
        t.verification.resolvable == (not t.verification.accepted_by_evidence) for t in bench.tasks
    )
    # an imported benchmark gets its stress variants as it is: synth never rebuilds hand-written tasks
    from shopping_companion.cli import app

    before = (tmp_path / "bench" / "tasks.jsonl").read_bytes()
    r = CliRunner().invoke(app, ["synth", "--out", str(tmp_path / "bench"), "--stress", str(tmp_path / "stress")])
    assert r.exit_code == 0, r.output
    assert "holds an imported benchmark" in " ".join(r.output.split())
    assert (tmp_path / "bench" / "tasks.jsonl").read_bytes() == before
    stressed = load_benchmark(tmp_path / "stress")
    variants = {t.variant_of for t in stressed.tasks if t.variant_of}
    assert variants and variants <= {t.task_id for t in bench.tasks}


def test_ability_tags_are_imported_and_a_bad_one_is_refused(products, pool, tmp_path):
    """A task may carry the memory abilities it tests (for the per-ability results); an unknown
    ability is refused naming the field and the allowed values."""
    from shopping_companion.benchmark.synth import load_benchmark

    first = json.loads(INDIRECT.read_text(encoding="utf-8").splitlines()[0])
    tagged = tmp_path / "tagged.jsonl"
    tagged.write_text(json.dumps({**first, "abilities": ["multi_session", "temporal"]}) + "\n", encoding="utf-8")
    settings = ImportSettings(search=False, sessions_per_user=8)
    res = import_tasks(tagged, tmp_path / "bench", products, pool, settings)
    assert res.ok, [i.text() for r in res.reports for i in r.errors]
    assert load_benchmark(tmp_path / "bench").tasks[0].abilities == ["multi_session", "temporal"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**first, "abilities": ["recall"]}) + "\n", encoding="utf-8")
    res = import_tasks(bad, tmp_path / "bench-bad", products, pool, settings)
    errors = [i for r in res.reports for i in r.errors]
    assert not res.ok and errors[0].field == "abilities[0]" and "knowledge_update" in errors[0].message, errors


def test_without_evidence_the_refusal_names_the_preference_and_suggests_evidence(importer, tmp_path):
    reports, tasks, _ = _run(importer, tmp_path, _without_evidence(INDIRECT.read_text(encoding="utf-8")))
    refused = [r for r in reports if r.errors]
    assert len(refused) >= 9 and len(tasks) == 10 - len(refused)
    src = [json.loads(x) for x in INDIRECT.read_text().splitlines()]
    for r in refused:
        for i in r.errors:
            assert i.check == "not_resolvable" and i.field.startswith("preferences[")
            pref = src[r.line - 1]["preferences"][int(i.field[len("preferences[") : -1])]
            assert f"states {pref['attribute']}={pref['value']!r}" in i.message
            assert f'give {i.field} "evidence": a verbatim quote of that turn' in i.message
    watch = next(r for r in refused if r.task_id == "ev-watch-father")
    assert "line 2, preferences[0]: no user turn of a needle session states strap material='Leather'" in (
        watch.errors[0].text()
    )


def _evidence_task(evidence, extra_needle: dict | None = None) -> str:
    needles = [
        {
            "session_id": "itch",
            "turns": [
                {"role": "user", "content": "Synthetic shirts  give me a RASH by lunch; I wear what grows in fields."},
                {"role": "assistant", "content": "Natural fibres, noted."},
            ],
        },
        {"session_id": "checks", "turns": [{"role": "user", "content": "Half my wardrobe is checked shirts."}]},
    ]
    if extra_needle:
        needles.append(extra_needle)
    prefs = [
        {"attribute": "pattern", "value": "Checked"},
        {"attribute": "fabric", "value": "Cotton", "evidence": evidence},
    ]
    return _shirt_task(preferences=prefs, needle_sessions=needles, dont_care=[]) + "\n"


@pytest.mark.parametrize(
    "evidence, check, words",
    [
        ("give me a rash by lunch; i wear", None, None),  # whitespace and case aside
        ({"session_id": "itch", "turn_index": 0}, None, None),
        ("what grows in the fields", "evidence", "in no user turn"),
        ("natural fibres", "evidence", "assistant turn (needle itch, turn 1)"),
        ({"session_id": "itch", "turn_index": 1}, "evidence", "the assistant's"),
        ({"session_id": "itch", "turn_index": 5}, "evidence", "has 2 turn(s)"),
        ({"session_id": "nope", "turn_index": 0}, "evidence", "'itch', 'checks'"),
    ],
)
def test_evidence_is_checked_against_the_needles(importer, tmp_path, evidence, check, words):
    reports, tasks, _ = _run(importer, tmp_path, _evidence_task(evidence))
    (r,) = reports
    if check is None:
        assert r.status == "imported" and len(tasks) == 1, [i.text() for i in r.issues]
        (w,) = [i for i in r.warnings if i.check == "not_resolvable"]
        assert w.field == "preferences[1]" and "accepted on its evidence in needle itch" in w.message
        v = tasks[0].verification  # recorded as accepted on evidence, not as resolvable by the matcher
        assert not v.resolvable and v.accepted_by_evidence == ["fabric=Cotton (slot 0)"]
    else:
        (e,) = r.errors
        assert (e.field, e.check) == ("preferences[1].evidence", check) and words in e.message, e.message


@pytest.mark.parametrize(
    "evidence, words",
    [
        (42, "verbatim quote of a needle's user turn"),
        ("   ", "verbatim quote of a needle's user turn"),
        (["a list"], "verbatim quote of a needle's user turn"),
        ({"session_id": "itch", "turn_index": True}, "valid integer"),  # a bool is not turn 1
        ({"session_id": "itch", "turn_index": "0"}, "valid integer"),  # nor a string turn 0
    ],
)
def test_evidence_of_the_wrong_form_is_refused_with_the_allowed_forms(importer, tmp_path, evidence, words):
    reports, tasks, _ = _run(importer, tmp_path, _evidence_task(evidence))
    (r,) = reports
    assert r.status == "invalid" and not tasks
    assert any(e.field.startswith("preferences[1].evidence") and words in e.message for e in r.errors), [
        i.text() for i in r.issues
    ]


def test_evidence_contradicted_by_another_needle_is_refused(importer, tmp_path):
    other = {
        "session_id": "later",
        "turns": [{"role": "user", "content": "I hate cotton shirts, they crease; never buy me cotton."}],
    }
    reports, tasks, _ = _run(importer, tmp_path, _evidence_task("i wear what grows in fields", other))
    (r,) = reports
    assert not tasks and r.status == "invalid"
    (e,) = r.errors
    assert (e.field, e.check) == ("preferences[1].evidence", "evidence_contradicted")
    assert "needle later contradicts" in e.message and "aversion" in e.message


def _update_task(old_date: str | None, new_date: str | None) -> str:
    """A knowledge update written by hand: one needle refuses cotton, another (the evidence) asks for it."""
    old = {
        "session_id": "old",
        "turns": [{"role": "user", "content": "I hate cotton shirts, they crease; never cotton."}],
    }
    new = {
        "session_id": "new",
        "turns": [{"role": "user", "content": "Polyester made me sweat all summer. Cotton shirts from now on."}],
    }
    for s, d in ((old, old_date), (new, new_date)):
        if d:
            s["date"] = d
    prefs = [
        {"attribute": "pattern", "value": "Checked"},
        {"attribute": "fabric", "value": "Cotton", "evidence": {"session_id": "new", "turn_index": 0}},
    ]
    checks = {"session_id": "checks", "turns": [{"role": "user", "content": "Half my wardrobe is checked shirts."}]}
    if old_date:
        checks["date"] = old_date
    return _shirt_task(preferences=prefs, needle_sessions=[checks, old, new], dont_care=[]) + "\n"


@pytest.mark.parametrize(
    "old_date, new_date, imported",
    [
        ("2023-03-01", "2023-06-01", True),  # a dated revision: the later needle wins, no conflict
        (None, None, False),  # undated: a real contradiction
        ("2023-06-01", "2023-03-01", False),  # the contradiction is the later statement
    ],
)
def test_a_dated_revision_between_needles_imports(importer, tmp_path, old_date, new_date, imported):
    reports, tasks, _ = _run(importer, tmp_path, _update_task(old_date, new_date))
    (r,) = reports
    if imported:
        assert r.status == "imported" and len(tasks) == 1, [i.text() for i in r.issues]
        assert not [i for i in r.issues if "contradict" in i.check], [i.text() for i in r.issues]
    else:
        assert not tasks and r.status == "invalid"
        (e,) = r.errors
        assert (e.field, e.check) == ("preferences[1].evidence", "evidence_contradicted")
        assert "needle old contradicts" in e.message
