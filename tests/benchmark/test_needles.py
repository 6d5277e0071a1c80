"""Needles like people talk: the paraphrase lexicon, resolvability through the shared value matcher,
numeric needles in other units, topic distractors, and the verbatim share on the real catalog."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from shopping_companion.benchmark.data.paraphrases import DIRECTIONS, load_paraphrases, validate
from shopping_companion.benchmark.synthesis.catalog_view import CatalogView, Feature, domain_of, item_synonyms
from shopping_companion.benchmark.synthesis.conflicts import ConflictDetector, WantedFeature
from shopping_companion.benchmark.synthesis.generators import SlotSpec, TaskSpec, TemplateGenerator, spoken_limit
from shopping_companion.benchmark.synthesis.verify import (
    gold_constraint,
    how_stated,
    leaked_values,
    needle_verbatim,
    stated_in,
    unstated_features,
    verbatim_share,
)
from shopping_companion.errors import ConfigError
from shopping_companion.judges.matching import default_matcher, parse_constraint, parse_quantities
from shopping_companion.types import Preference, Session, Turn


def _session(*user_turns: str) -> Session:
    turns = []
    for u in user_turns:
        turns += [Turn(role="user", content=u), Turn(role="assistant", content="I see.")]
    return Session(session_id="s_test", turns=turns, source="test")


# --------------------------------------------------------------------------- the lexicon file


def test_lexicon_file_is_valid():
    assert validate() == []


def test_lexicon_covers_the_values_synthesis_samples_most():
    lex = load_paraphrases()
    for key, concept in [
        ("colour", "black"),
        ("colour", "white"),
        ("colour", "blue"),
        ("colour", "navy"),
        ("material", "cotton"),
        ("material", "polyester"),
        ("material", "synthetic leather"),
        ("occasion", "casual"),
        ("sleeve length", "short sleeves"),
        ("sleeve length", "long sleeves"),
        ("fit", "regular fit"),
        ("fit", "slim fit"),
        ("neck", "round neck"),
        ("neck", "polo collar"),
        ("pattern", "solid"),
        ("pattern", "printed"),
        ("pattern", "striped"),
        ("closure", "lace up"),
        ("closure", "ankle loop"),
        ("display", "analogue"),
        ("heel type", "block"),
        ("toe shape", "open toe"),
        ("waist rise", "mid rise"),
        ("length", "knee length"),
        ("season", "summer"),
        ("gender", "women"),
        ("sport", "running"),
        ("flavour", "chocolate"),
        ("diet", "organic"),
        ("connectivity", "bluetooth"),
    ]:
        assert lex.phrases(key, concept), (key, concept)
    # the three styles all occur, and the big concepts have more than one of them
    styles = Counter(p.style for cs in lex.statements.values() for ps in cs.values() for p in ps)
    assert set(styles) == {"paraphrase", "family", "experience"}
    assert {p.style for p in lex.phrases("colour", "navy")} >= {"family", "paraphrase"}
    assert {p.style for p in lex.phrases("sleeve length", "short sleeves")} >= {"paraphrase", "experience"}


def test_validator_rejects_verbatim_foreign_and_unknown_entries(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "statements:\n"
        "  colour:\n"
        "    navy:\n"
        "      paraphrase: ['I always wear navy.', 'I like it red and deep.']\n"
        "    not a colour:\n"
        "      paraphrase: ['Something.']\n"
        "  not a key:\n"
        "    x:\n"
        "      paraphrase: ['Something else.']\n"
        "numeric:\n"
        "  width:\n"
        "    le: ['no placeholder here']\n",
        encoding="utf-8",
    )
    problems = "\n".join(validate(load_paraphrases(str(bad))))
    assert "states the value 'navy' verbatim" in problems
    assert "mentions other values of 'colour': ['red']" in problems
    assert "no such concept in vocabulary 'colour'" in problems
    assert "statements.not a key: not a canonical key" in problems
    assert "needs exactly one {limit}" in problems


@pytest.mark.parametrize(
    "text, message",
    [
        ("statements:\n  colour:\n    navy:\n      slang: ['x']\n", "unknown styles ['slang']"),
        ("statements:\n  colour: {}\n  colour: {}\n", "duplicate key 'colour'"),
        ("numeric:\n  width:\n    sideways: ['{limit}']\n", "must map directions"),
        ("oops: 1\n", "unknown top-level fields ['oops']"),
    ],
)
def test_malformed_lexicon_files_raise_a_clear_error(tmp_path, text, message):
    f = tmp_path / "lex.yaml"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_paraphrases(str(f))


# --------------------------------------------------------------------------- resolvable via the matcher


@pytest.mark.parametrize(
    "attribute, value, text, how",
    [
        ("sleeve length", "Short Sleeves", "Honestly, I always go for half sleeves.", "vocabulary"),
        (
            "sleeve length",
            "Short Sleeves",
            "Anything past the elbow stays in the cupboard, I just get too warm.",
            "paraphrase",
        ),
        (
            "colour",
            "Navy Blue",
            "Something in the blue family, but really deep, the colour of a night sky.",
            "paraphrase",
        ),
        ("colour", "Blue", "That deep midnight shade of a sailor's uniform is my favourite.", "paraphrase"),  # narrower
        ("fastening", "Ankle Loop", "Oh and I get blisters unless there's a strap across the ankle.", "paraphrase"),
        (
            "usage",
            "Casual",
            "I spend my days in cafés and nobody cares what I wear, so I keep it relaxed and comfy.",
            "paraphrase",
        ),
        ("colour", "Navy Blue", "I only wear navy, really.", "vocabulary"),
        ("colour", "Navy Blue", "My favourite is navy blue.", "verbatim"),
        ("size", "L", "I am broad-shouldered, so I usually take a large.", "vocabulary"),
    ],
)
def test_hand_written_indirect_needles_are_resolvable(attribute, value, text, how):
    assert how_stated(attribute, value, text) == how
    p = Preference(attribute=attribute, value=value)
    assert unstated_features([p], [_session("Hi there.", text)]) == []


@pytest.mark.parametrize(
    "attribute, value, text",
    [
        ("sleeve length", "Short Sleeves", "I only ever wear full sleeves."),  # the contradicting value
        ("sleeve length", "Short Sleeves", "I want full sleeves, all the way to the wrist."),  # long-sleeve entry
        ("colour", "Navy Blue", "I love blue."),  # broader than the gold: not enough
        ("colour", "Black", "I love the colour of ripe tomatoes and fire engines."),  # a red statement
        ("material", "Cotton", "I'm fine with man-made fibres, they last longer and dry faster."),
        ("size", "M", "I'm not sure, it's about 1.5 m long."),  # "I'm" and "m" are not the size M
        ("width", "at most 150 cm", "It needs to be at least 1.5 m wide to cover the whole wall."),
    ],
)
def test_needles_stating_another_value_are_not_resolvable(attribute, value, text):
    assert how_stated(attribute, value, text) is None
    assert unstated_features([Preference(attribute=attribute, value=value)], [_session(text)])


@pytest.mark.parametrize(
    "text, how",
    [
        ("Honestly, if it says U.S. Polo Assn. On it, I'm already halfway sold.", "verbatim"),
        ("I love U.S. Polo Assn. shirts.", "verbatim"),
        ("No. U.S. Polo Assn. is what I wear.", "verbatim"),  # "No." is its own sentence
        ("Never U.S. Polo Assn. again.", None),  # a negated mention
        ("I like polo shirts. Assn. meetings bore me.", None),
    ],
)
def test_a_value_with_full_stops_is_one_mention_not_several_sentences(text, how):
    assert how_stated("brand", "U.S. Polo Assn.", text) == how


def test_only_user_turns_count_and_the_instruction_is_checked_for_paraphrases():
    p = Preference(attribute="sleeve length", value="Short Sleeves")
    assistant_only = Session(
        session_id="s",
        turns=[Turn(role="user", content="Hello."), Turn(role="assistant", content="I always go for half sleeves.")],
    )
    assert unstated_features([p], [assistant_only]) == [p]
    assert leaked_values([p], "Find me a t-shirt; anything past the elbow stays in the cupboard, I just get too warm.")
    assert leaked_values([p], "Find me a half-sleeved t-shirt.")
    assert not leaked_values([p], "Find me a t-shirt that suits me.")


# --------------------------------------------------------------------------- numeric needles


@pytest.mark.parametrize(
    "attribute, value, text",
    [
        ("width", "at most 150 cm", "The alcove is tiny, so it can be at most 1.5 m wide, otherwise it won't fit."),
        ("width", "at most 150 cm", "I measured the gap: no more than 59 inches across."),
        ("width", "at most 200 cm", "Anything up to two metres works, but nothing bigger."),
        ("storage", "at least 64 GB", "I take thousands of photos, so I need no less than 64 GB of space."),
        ("weight", "at most 5 kg", "My back is not great, no more than five kilos for me to lift."),
        ("weight", "at most 5 kg", "It goes in my bag every day, so a maximum of 5000 grams."),
        ("net quantity", "at least 1 l", "We're a big family, so no less than 1000 ml per pack."),
        ("height", "at most 120 cm", "There's a window sill right above it, so no more than 1200 mm high."),
    ],
)
def test_numeric_needles_in_other_units_are_resolvable(attribute, value, text):
    assert how_stated(attribute, value, text) == "quantity"


def test_every_numeric_template_reads_back_as_its_direction():
    lex = load_paraphrases()
    limits = {"le": ("at most", "<="), "ge": ("at least", ">="), "eq": ("", "=")}
    sample = {"length": "1.5 m", "mass": "5 kg", "volume": "500 ml", "information": "64 GB", "dimensionless": "4"}
    for label, banks in lex.numeric.items():
        for direction in DIRECTIONS:
            for template in banks.get(direction, []):
                limit = sample.get(label, "1.5 m")
                if label in ("weight",):
                    limit = "5 kg"
                elif label in ("capacity", "storage", "ram"):
                    limit = "64 GB"
                elif label in ("pack size", "net quantity"):
                    limit = "500 g"
                elif label == "seats":
                    limit = "4"
                words, op = limits[direction]
                text = template.format(limit=limit)
                got = parse_constraint(text)
                want = parse_constraint(f"{words} {limit}".strip())
                assert got is not None and want is not None, text
                assert got.op in ({op, op.rstrip("=")} if op != "=" else {"="}), (text, got.op)
                assert got.same_as(want), text


@pytest.mark.parametrize(
    "value", ["at most 150 cm", "at most 45 cm", "at least 64 GB", "at most 5 kg", "at least 500 ml", "at least 3"]
)
def test_spoken_limits_parse_back_to_the_same_quantity(value):
    c = parse_constraint(value)
    rng = random.Random(5)
    seen = set()
    for _ in range(40):
        said = spoken_limit(c, value.split()[-1], rng)
        seen.add(said)
        qs = parse_quantities(said) if c.dim else ()
        if c.dim:
            assert qs and qs[0].dim == c.dim and abs(qs[0].value - c.lo) <= 0.005 * c.lo, said
        else:
            assert parse_constraint(said).lo == c.lo, said
    if c.dim in ("[length]", "[mass]", "[length] ** 3"):
        assert len(seen) >= 2  # other units and number words, not one fixed phrase


def _numeric_spec() -> TaskSpec:
    from shopping_companion.types import Product

    p = Product(
        product_id="ikea_sa:1",
        title="Bookcase",
        source="ikea_sa",
        shop="IKEA",
        shop_id="ikea",
        price=300.0,
        category_path=["Furniture", "Bookcases"],
        attributes={"width_cm": "146"},
    )
    feats = [
        Feature(key="width_cm", label="width", value="at most 150 cm", kind="numeric", quantity="146 cm"),
        Feature(key="colour", label="colour", value="White"),
    ]
    slot = SlotSpec(0, p, "bookcase", ["bookcases"], "home", feats, [])
    return TaskSpec(task_id="t", index=0, task_type="single", slots=[slot], n_needles=1, seed=1)


def test_generated_numeric_needles_are_resolvable_and_mostly_not_verbatim():
    gen = TemplateGenerator()
    spec = _numeric_spec()
    prefs = [Preference(attribute=f.label, value=f.value) for _, f in spec.wanted]
    verbatim = 0
    for seed in range(40):
        sessions = [_session_of(t) for t in gen.dialogues(spec, random.Random(seed))]
        assert unstated_features(prefs, sessions) == []
        users = [t.content for s in sessions for t in s.turns if t.role == "user"]
        verbatim += any(stated_in("at most 150 cm", u) for u in users)
    assert verbatim <= 8


def _session_of(turns: list[Turn]) -> Session:
    return Session(session_id="s_gen", turns=turns, source="test")


def test_generator_is_deterministic_and_validates_probabilities():
    spec = _numeric_spec()
    a = TemplateGenerator().dialogues(spec, random.Random(3))
    b = TemplateGenerator().dialogues(spec, random.Random(3))
    assert a == b
    with pytest.raises(ValueError, match="paraphrase_p"):
        TemplateGenerator(paraphrase_p=1.5)
    assert TemplateGenerator(paraphrase_p=0.0).describe()["paraphrase_p"] == 0.0


def test_paraphrase_probability_zero_keeps_catalog_words():
    spec = _numeric_spec()
    spec.slots[0].wanted = [Feature(key="Sleeve Length", label="sleeve length", value="Short Sleeves")]
    for seed in range(10):
        turns = TemplateGenerator(paraphrase_p=0.0).dialogues(spec, random.Random(seed))
        assert any(stated_in("Short Sleeves", t.content) for s in turns for t in s if t.role == "user")


# --------------------------------------------------------------------------- the real catalog


@pytest.fixture(scope="module")
def view(catalog_products):
    """The real catalog's view: the one synthesis over it uses in this process (``reuse.py``)."""
    from shopping_companion.benchmark.synthesis.reuse import view_and_matcher

    return view_and_matcher(catalog_products, 2, True).view


def _real_specs(view: CatalogView, n: int, seed: int) -> list[TaskSpec]:
    """Task specs as synthesis samples them: a product, 1-3 wanted features weighted by label, the
    rest does-not-matter; every fifth spec is a two-product request (statements scoped)."""
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        k = 2 if i % 5 == 4 else 1
        slots = []
        for j in range(k):
            p = rng.choice(view.eligible)
            feats = list(view.features(p))
            wanted: list[Feature] = []
            pool = list(feats)
            for _ in range(min(len(pool), rng.choice([1, 2, 2, 3]))):
                f = rng.choices(pool, weights=[x.weight for x in pool])[0]
                pool.remove(f)
                wanted.append(f)
            item = view.item(p)
            slots.append(SlotSpec(j, p, item, item_synonyms(p, item), domain_of(p), wanted, pool[:2]))
        n_needles = rng.choice([1, 2]) if k == 1 else 1
        specs.append(
            TaskSpec(
                task_id=f"t{i}",
                index=i,
                task_type="single" if k == 1 else "addon",
                slots=slots,
                n_needles=min(n_needles, len(slots[0].wanted)),
                seed=i,
            )
        )
    return specs


def test_real_catalog_needles_are_resolvable_and_agree_with_the_detector(view):
    gen = TemplateGenerator()
    detector = ConflictDetector(view.vocab)
    n_sessions = n_conflicting = 0
    how = Counter()
    for spec in _real_specs(view, 200, seed=17):
        rng = random.Random(spec.seed)
        sessions = [
            Session(session_id=f"{spec.task_id}-{j}", turns=t, source="test")
            for j, t in enumerate(gen.dialogues(spec, rng))
        ]
        prefs = [Preference(slot=s, attribute=f.label, value=f.value) for s, f in spec.wanted]
        assert unstated_features(prefs, sessions) == [], spec.task_id
        wanted = [WantedFeature(slot=s, label=f.label, value=f.value) for s, f in spec.wanted]
        for s in sessions:
            n_sessions += 1
            n_conflicting += bool(detector.find(s, wanted, cache=False))
        for p in prefs:
            ways = {how_stated(p.attribute, p.value, t.content) for s in sessions for t in s.turns if t.role == "user"}
            how[min(ways - {None})] += 1
    assert how["paraphrase"] > how["verbatim"], how
    assert n_conflicting / n_sessions <= 0.05, n_conflicting


def test_real_benchmark_verbatim_share_is_at_most_40_percent(catalog_products, sgd_sessions):
    """The build itself (real catalog, real SGD haystack, template generator): at most 40 % of the
    needle sessions of 200 tasks state a wanted gold value verbatim, and every task is resolvable."""
    from shopping_companion.benchmark.synth import SynthConfig, synthesize

    cfg = SynthConfig(n_tasks=200, seed=21, sessions_per_user=4, addon_share=0.4)
    out = synthesize(catalog_products, sgd_sessions[:3000], cfg)
    assert len(out.tasks) >= 180
    for t in out.tasks:
        assert unstated_features(t.preferences, [out.sessions[s] for s in t.needle_session_ids]) == []
    vs = verbatim_share(out.tasks, out.sessions)
    assert vs.n_sessions >= 250
    assert vs.sessions <= 0.40, vs
    assert vs.preferences <= 0.30, vs


def test_real_catalog_distractors_state_nothing_and_pass_the_detector(view):
    gen = TemplateGenerator()
    detector = ConflictDetector(view.vocab)
    total = named = 0
    for spec in _real_specs(view, 60, seed=3):
        rng = random.Random(spec.seed)
        ds = gen.distractors(spec, rng, n=3)
        assert len(ds) <= 3
        total += len(ds)
        wanted = [WantedFeature(slot=s, label=f.label, value=f.value) for s, f in spec.wanted]
        for turns in ds:
            assert turns[0].role == "user" and all(a.role != b.role for a, b in zip(turns, turns[1:]))
            s = Session(session_id="d", turns=turns, source="test")
            assert detector.statements(s, cache=False) == []
            assert detector.find(s, wanted, cache=False) == []
            for _, f in spec.wanted:
                assert not any(how_stated(f.label, f.value, t.content) for t in turns), (f, turns)
            # on topic: most name the product type or its everyday name (the rest talk about its domain)
            names = [x.lower() for s in spec.slots for x in (s.product_type, *s.synonyms)]
            named += any(n in " ".join(t.content.lower() for t in turns) for n in names)
    assert total >= 120  # almost always the n requested
    assert named >= 0.6 * total
    assert gen.distractors(_real_specs(view, 1, seed=1)[0], random.Random(0), n=0) == []
    with pytest.raises(ValueError, match="n must be >= 0"):
        gen.distractors(_real_specs(view, 1, seed=1)[0], random.Random(0), n=-1)


# --------------------------------------------------------------------------- verbatim share


def test_verbatim_share_counts_sessions_and_preferences():
    from shopping_companion.types import ProductSlot, Task

    s1 = _session("I only wear black, always.")  # verbatim
    s2 = _session("Anything past the elbow stays in the cupboard, I just get too warm.")  # indirect
    s1 = s1.model_copy(update={"session_id": "a"})
    s2 = s2.model_copy(update={"session_id": "b"})
    task = Task(
        task_id="t",
        task_type="single",
        split="test",
        instruction="Find me a t-shirt.",
        user_id="u",
        history=[],
        needle_session_ids=["a", "b"],
        preferences=[
            Preference(attribute="colour", value="Black"),
            Preference(attribute="sleeve length", value="Short Sleeves"),
        ],
        dont_care=[],
        slots=[ProductSlot(product_type="t-shirt", reference_product_id="p1")],
    )
    sessions = {"a": s1, "b": s2}
    assert needle_verbatim(task, sessions) == {
        (0, "colour", "Black"): True,
        (0, "sleeve length", "Short Sleeves"): False,
    }
    vs = verbatim_share([task], sessions)
    assert (vs.sessions, vs.preferences, vs.n_sessions, vs.n_preferences) == (0.5, 0.5, 2, 2)
    assert verbatim_share([], {}).sessions == 0.0
    with pytest.raises(KeyError, match="needle session 'a'"):
        verbatim_share([task], {"b": s2})


def test_gold_constraint_only_for_numeric_values():
    m = default_matcher()
    assert gold_constraint("width", "at most 150 cm") is not None
    assert gold_constraint("compatible model", "Galaxy S3") is None
    assert gold_constraint("colour", "Navy Blue") is None
    assert m.key("usage").name == "occasion"


@pytest.mark.parametrize(
    ("attribute", "value", "text", "stated"),
    [
        ("material", "Leather", "I'm vegan, so no leather ever.", False),
        ("colour", "Black", "Anything but black, please.", False),
        ("colour", "Black", "I never buy black.", False),
        ("colour", "Black", "Black is my colour. I never wear brown.", True),
        ("fabric", "Cotton", "Everything that isn't cotton ends up at the back of my wardrobe.", True),
        ("width", "at most 40 cm", "Nothing over 40 cm wide will fit there.", True),
        ("width", "at most 40 cm", "It can't be wider than 40 cm.", True),
        ("width", "at most 40 cm", "40 cm wide at most, the gap is tiny.", True),
        ("width", "at most 40 cm", "It must be at least 40 cm wide.", False),
    ],
)
def test_negated_mentions_do_not_state_a_value(attribute, value, text, stated):
    from shopping_companion.benchmark.synthesis.verify import how_stated

    assert (how_stated(attribute, value, text) is not None) is stated
