"""Benchmark synthesis with the offline template generator (Shopping Companion §4, single tasks).

For each task: pick a real product with rich attributes as the reference (optionally checking it
is in the BM25 top 50 for a query an agent could form), choose 1–3 of its real attribute values as
the wanted features and some others as does-not-matter features, write one or two preference
"needle" sessions that reveal the wanted features indirectly, hide them among real conversations
(SGD, ShareGPT) with consistent dates, and write an instruction that names the product type but
not the preferences. Deterministic from ``seed``: the same inputs and seed give byte-identical
files.

Session ids shown to the agent are opaque (``s_<hash>``) so the source of a session (a real chat
or a needle) cannot be read off its id; ``Session.source`` keeps the provenance.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.benchmark import templates as T
from shopping_companion.types import (
    Preference,
    Product,
    ProductSlot,
    Session,
    SessionRef,
    Task,
    Turn,
)

FORMAT_VERSION = 1


class SynthConfig(BaseModel):
    """Settings of a template-generator build.

    ``sessions_per_user``: real haystack sessions per user (≥ 40 by default; the paper's users
    have ~56). ``test_fraction``: share of tasks in the test split. ``max_session_chars``: real
    sessions longer than this are not used (keeps embedding cost bounded).
    """

    model_config = ConfigDict(extra="forbid")
    n_tasks: int = Field(default=50, ge=1)
    seed: int = 0
    sessions_per_user: int = Field(default=42, ge=1)
    min_preferences: int = Field(default=1, ge=1)
    max_preferences: int = Field(default=3, ge=1)
    max_dont_care: int = Field(default=3, ge=0)
    test_fraction: float = Field(default=0.2, ge=0, le=1)
    sharegpt_share: float = Field(default=0.4, ge=0, le=1)
    max_session_chars: int = Field(default=6000, ge=200)
    start_date: str = "2023-01-02"
    searchable_top_k: int = Field(default=50, ge=1, le=50)


class SynthError(ValueError):
    """The inputs cannot produce the requested benchmark (message says why)."""


Searcher = Callable[[str, int], list[str]]  # (query, top_k) -> product ids


def opaque_id(*parts: str) -> str:
    """A stable opaque session id ``s_<12 hex>`` from the given parts."""
    return "s_" + hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:12]


def _pref_candidates(p: Product) -> list[tuple[str, str, str]]:
    """(catalog key, label, value) pairs of ``p`` the generator can phrase."""
    out = []
    for key, value in p.attributes.items():
        if key not in T.PREFERENCE_PHRASES:
            continue
        v = str(value).strip()
        if v.lower() in T.UNINFORMATIVE_VALUES or len(v) > 40:
            continue
        out.append((key, T.PREFERENCE_PHRASES[key][0], v))
    # one preference per label (colour from base_colour beats colour1 duplicates)
    seen: set[str] = set()
    uniq = []
    for key, label, v in out:
        if label in seen:
            continue
        seen.add(label)
        uniq.append((key, label, v))
    return uniq


def _item_name(p: Product) -> str:
    name = T.ITEM_NAMES.get(p.category, p.category.lower())
    gender = T.GENDER_WORDS.get(p.attributes.get("gender", ""), "")
    if gender and name.startswith("pair of "):
        return f"pair of {gender} {name[len('pair of '):]}"
    return f"{gender} {name}".strip()


def _article(item: str) -> str:
    return "an" if item[:1].lower() in "aeiou" else "a"


def _phrase_value(label: str, v: str) -> str:
    return v if label in ("watch display",) else v.lower()


def searchable_query(task_item: str, preferences: Iterable[Preference]) -> str:
    """The query an agent could form from the instruction and the preferences."""
    words = task_item.replace("pair of ", "")
    return " ".join([words] + [p.value for p in preferences])


def _needle_session(
    rng: random.Random, prefs: list[tuple[str, str, str]], sid: str, source: str
) -> Session:
    opener_u, opener_a = rng.choice(T.NEEDLE_OPENERS)
    turns = [Turn(role="user", content=opener_u), Turn(role="assistant", content=opener_a)]
    acks = rng.sample(T.ASSISTANT_ACKS, k=min(len(prefs), len(T.ASSISTANT_ACKS)))
    for (key, label, value), ack in zip(prefs, acks):
        phrase = rng.choice(T.PREFERENCE_PHRASES[key][1]).format(v=_phrase_value(label, value))
        turns.append(Turn(role="user", content=phrase))
        turns.append(Turn(role="assistant", content=ack))
    close_u, close_a = rng.choice(T.NEEDLE_CLOSERS)
    turns += [Turn(role="user", content=close_u), Turn(role="assistant", content=close_a)]
    return Session(session_id=sid, turns=turns, source=source)


@dataclass
class SynthOutput:
    tasks: list[Task]
    sessions: dict[str, Session]
    manifest: dict[str, Any]
    dropped: dict[str, int] = field(default_factory=dict)


def synthesize(
    products: list[Product],
    pool: list[Session],
    config: SynthConfig,
    searcher: Searcher | None = None,
    sources: dict[str, Any] | None = None,
) -> SynthOutput:
    """Build ``config.n_tasks`` single-product tasks.

    Args:
        products: the catalog (any order; sorted by id internally).
        pool: real haystack sessions (SGD / ShareGPT), ids unique.
        searcher: optional ``(query, top_k) -> ids``; when given, a reference product must be in
            the top ``searchable_top_k`` for :func:`searchable_query`, else another is drawn.
        sources: provenance recorded in the manifest (paths, hashes).

    Raises:
        SynthError: too few attribute-rich products or too few real sessions.
    """
    if config.min_preferences > config.max_preferences:
        raise SynthError("min_preferences must be <= max_preferences")
    cands: dict[str, list[Product]] = {}
    for p in sorted(products, key=lambda x: x.product_id):
        if p.category in T.ITEM_NAMES and p.price is not None and len(_pref_candidates(p)) >= config.min_preferences:
            cands.setdefault(p.category, []).append(p)
    if not cands:
        raise SynthError(
            "no attribute-rich products: need products whose finest category is one of "
            f"{sorted(T.ITEM_NAMES)[:8]}… with at least {config.min_preferences} phrasable attributes"
        )
    usable = [s for s in pool if sum(len(t.content) for t in s.turns) <= config.max_session_chars and len(s.turns) >= 2]
    usable.sort(key=lambda s: s.session_id)
    sgd = [s for s in usable if s.source.startswith("sgd")]
    other = [s for s in usable if not s.source.startswith("sgd")]
    if len(usable) < config.sessions_per_user:
        raise SynthError(
            f"conversation pool has {len(usable)} usable sessions (≤ {config.max_session_chars} "
            f"chars, ≥ 2 turns); each user needs sessions_per_user={config.sessions_per_user}"
        )
    categories = sorted(cands)
    start = date.fromisoformat(config.start_date)

    tasks: list[Task] = []
    sessions: dict[str, Session] = {}
    dropped = {"not_searchable": 0}
    n_test = round(config.n_tasks * config.test_fraction)
    for i in range(config.n_tasks):
        rng = random.Random(f"shopcomp-synth:{config.seed}:{i}")
        task_id = f"sc-{config.seed}-{i:05d}"
        user_id = f"user-{config.seed}-{i:05d}"

        # Step 1: reference product (retry until searchable, if a searcher is given).
        chosen: tuple[Product, list[tuple[str, str, str]], list[Preference], str] | None = None
        for _attempt in range(30):
            cat = rng.choice(categories)
            p = rng.choice(cands[cat])
            avail = _pref_candidates(p)
            k = rng.randint(config.min_preferences, min(config.max_preferences, len(avail)))
            picked = rng.sample(avail, k)
            prefs = [Preference(slot=0, attribute=label, value=v) for _, label, v in picked]
            item = _item_name(p)
            if searcher is not None:
                ids = searcher(searchable_query(item, prefs), config.searchable_top_k)
                if p.product_id not in ids:
                    dropped["not_searchable"] += 1
                    continue
            chosen = (p, picked, prefs, item)
            break
        if chosen is None:
            raise SynthError(f"task {task_id}: no searchable reference product after 30 draws")
        p, picked, prefs, item = chosen
        rest = [c for c in _pref_candidates(p) if c not in picked]
        dont_care = [
            Preference(slot=0, attribute=label, value=v)
            for _, label, v in rng.sample(rest, min(len(rest), config.max_dont_care))
        ]

        # Step 3: needle sessions (1, or 2 when there are >= 2 preferences and the coin says so).
        n_needles = 2 if len(picked) >= 2 and rng.random() < 0.5 else 1
        groups = [picked[j::n_needles] for j in range(n_needles)]
        needles = [
            _needle_session(rng, g, opaque_id(task_id, "needle", str(j)), f"template-needle:{task_id}:{j}")
            for j, g in enumerate(groups)
        ]

        # Step 4: haystack of real sessions + injection at random positions with dates.
        n_other = round(config.sessions_per_user * config.sharegpt_share) if other else 0
        n_other = min(n_other, len(other))
        n_sgd = min(config.sessions_per_user - n_other, len(sgd))
        n_other = min(config.sessions_per_user - n_sgd, len(other))
        hay = rng.sample(sgd, n_sgd) + rng.sample(other, n_other)
        rng.shuffle(hay)
        hay_sessions = []
        for s in hay:
            sid = opaque_id(s.source or "pool", s.session_id)
            if sid not in sessions:
                sessions[sid] = Session(session_id=sid, turns=s.turns, source=s.source or s.session_id)
            hay_sessions.append(sid)
        order = list(hay_sessions)
        for n in needles:
            order.insert(rng.randint(0, len(order)), n.session_id)
            sessions[n.session_id] = n
        d = start + timedelta(days=rng.randint(0, 60))
        history = []
        for sid in order:
            history.append(SessionRef(session_id=sid, date=d.isoformat()))
            d += timedelta(days=rng.randint(1, 6))

        # Step 2: instruction naming the product type, not the preferences.
        instruction = rng.choice(T.INSTRUCTION_TEMPLATES).format(item=item)
        instruction = re.sub(r"\ba ([aeiou])", r"an \1", instruction)
        tasks.append(
            Task(
                task_id=task_id,
                task_type="single",
                split="test" if i < n_test else "train",
                instruction=instruction,
                user_id=user_id,
                history=history,
                needle_session_ids=[n.session_id for n in needles],
                preferences=prefs,
                dont_care=dont_care,
                slots=[ProductSlot(product_type=item, category_path=p.category_path, reference_product_id=p.product_id)],
                currency=p.currency,
                seed=config.seed,
            )
        )

    manifest = {
        "format_version": FORMAT_VERSION,
        "generator": "template",
        "config": config.model_dump(),
        "sources": sources or {},
        "counts": {
            "tasks": len(tasks),
            "train": sum(t.split == "train" for t in tasks),
            "test": sum(t.split == "test" for t in tasks),
            "sessions": len(sessions),
            "needle_sessions": sum(len(t.needle_session_ids) for t in tasks),
            "preferences_mean": round(sum(len(t.preferences) for t in tasks) / len(tasks), 3),
        },
        "dropped": dropped,
    }
    return SynthOutput(tasks=tasks, sessions=sessions, manifest=manifest, dropped=dropped)


def _atomic_write_lines(path: Path, lines: Iterable[str]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line)
            f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_benchmark(out: SynthOutput, directory: str | Path) -> Path:
    """Write ``tasks.jsonl``, ``sessions.jsonl`` and ``manifest.json`` (each atomically; the
    manifest last, so a directory with a manifest is complete)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").unlink(missing_ok=True)
    _atomic_write_lines(d / "tasks.jsonl", (t.model_dump_json() for t in out.tasks))
    _atomic_write_lines(d / "sessions.jsonl", (out.sessions[k].model_dump_json() for k in sorted(out.sessions)))
    _atomic_write_lines(d / "manifest.json", [json.dumps(out.manifest, indent=2, sort_keys=True)])
    return d


class Benchmark(BaseModel):
    """A benchmark directory loaded into memory."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    tasks: list[Task]
    sessions: dict[str, Session]
    manifest: dict[str, Any]


def load_benchmark(directory: str | Path) -> Benchmark:
    """Load a benchmark directory written by :func:`write_benchmark`.

    Raises:
        FileNotFoundError: the directory or its manifest is missing (an incomplete build).
    """
    d = Path(directory)
    if not (d / "manifest.json").is_file():
        raise FileNotFoundError(
            f"{d}: no manifest.json, so this is not a complete benchmark directory "
            "(build it with `shopcomp synth --out DIR`)"
        )
    manifest = json.loads((d / "manifest.json").read_text())
    tasks = [Task.model_validate_json(line) for line in open(d / "tasks.jsonl", encoding="utf-8") if line.strip()]
    sessions = {}
    for line in open(d / "sessions.jsonl", encoding="utf-8"):
        if line.strip():
            s = Session.model_validate_json(line)
            sessions[s.session_id] = s
    return Benchmark(tasks=tasks, sessions=sessions, manifest=manifest)
