"""Decontamination: no test-split task may appear in SFT data.

A test task *appears* in an example when any of these is found in it:

``task_id``
    the example was collected on the test task itself;
``instruction``
    the task's instruction (whitespace- and case-normalised) occurs in any message;
``needle_session``
    a needle session id occurs in any message, or a user turn of a needle session (normalised,
    at least ``MIN_NEEDLE_WORDS`` words) occurs in any message;
``reference_product``
    a reference product id occurs in assistant-written text (thinking, tool-call arguments,
    answers). Its occurrence in a tool observation only (a train task's search happened to list
    it: one shared catalog) is reported as ``exposure`` and fails only with
    ``products="all"``.

Needle text is matched per user turn and, for a turn of several sentences, per sentence (of at
least ``MIN_NEEDLE_WORDS`` words) as well: one sentence of a test needle copied into a train
example is test text too.

Text that a train task owns is not a finding. A test text (an instruction, a needle turn or one
of its sentences) is *owned by train* when, normalised, it is contained in a text a train task
owns: a train instruction or a user turn of a session in a train task's history. So a templated
line of a test needle ("Okay, I think I have a plan now.") that also occurs inside a longer user
turn of a train needle session is not leakage: the train example shows it as part of the train
task's own session. A test needle turn (or sentence) that no train text contains is always a
finding. Test texts skipped this way are counted in the report (``shared_with_train``) so a leaky
benchmark stays visible.

Matching is linear in the data: id-like tokens are intersected with the id sets, and text
patterns are found through 5-word shingle anchors and then verified by substring search. The
containment check against train-owned text uses the same anchors: every train-owned text is
scanned once against the index of test patterns (cost linear in the train text), so the
paper's scale (thousands of examples, 200 test tasks, hundreds of train histories) takes seconds.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any, Iterable, Literal, Mapping, get_args

from pydantic import BaseModel, ConfigDict

from shopping_companion.errors import ConfigError
from shopping_companion.sentences import split_sentences
from shopping_companion.types import Session, Task
from shopping_companion.errors import ContaminationError  # noqa: F401 - re-exported

__all__ = [
    "Contamination",
    "ContaminationError",
    "find_contamination",
    "check_decontaminated",
    "decontamination_report",
    "MIN_NEEDLE_WORDS",
    "PRODUCT_RULES",
    "ProductsRule",
    "TrainMatch",
]

MIN_NEEDLE_WORDS = 5
_SHINGLE = 5
_WORD = re.compile(r"[a-z0-9]+")
_ID_TOKEN = re.compile(r"[A-Za-z0-9:_.\-]+")

#: Where a reference product id counts as a violation (module docstring).
ProductsRule = Literal["assistant", "all", "none"]
#: Allowed values of :data:`ProductsRule`.
PRODUCT_RULES: tuple[str, ...] = get_args(ProductsRule)

#: How a test text is matched against train-owned text (:func:`find_contamination`).
TrainMatch = Literal["contained", "whole_turn"]

Kind = Literal["task_id", "instruction", "needle_session", "reference_product", "exposure"]


class Contamination(BaseModel):
    """One finding: ``example_id`` contains ``kind`` of test task ``test_task_id``; ``detail``
    names what matched and where (message index and role)."""

    model_config = ConfigDict(extra="forbid")
    example_id: str
    test_task_id: str
    kind: Kind
    detail: str


def _norm_words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _message_texts(example: Any) -> list[tuple[int, str, str]]:
    """(index, role, text) of every message, tool-call arguments included."""
    out = []
    for i, m in enumerate(example.messages):
        text = str(m.get("content") or "")
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            text += "\n" + str(fn.get("name", "")) + " " + str(fn.get("arguments", ""))
        out.append((i, str(m.get("role")), text))
    return out


def _id_tokens(text: str) -> set[str]:
    """Id-like tokens, also without surrounding punctuation and split at ``::`` (``@REC::id@``)."""
    out: set[str] = set()
    for tok in _ID_TOKEN.findall(text):
        out.add(tok)
        for part in tok.split("::"):
            out.add(part)
            out.add(part.strip(".:-"))
    return out


class _TextIndex:
    """Find which normalised word sequences (patterns) occur in a text."""

    def __init__(self) -> None:
        self.anchors: dict[tuple[str, ...], list[tuple[str, str, str]]] = defaultdict(list)

    def add(self, words: list[str], key: str, kind: str, label: str) -> None:
        if len(words) < _SHINGLE:
            return
        self.anchors[tuple(words[:_SHINGLE])].append((" ".join(words), key, kind + "\x00" + label))

    def find(self, text: str) -> list[tuple[str, str]]:
        words = _norm_words(text)
        if len(words) < _SHINGLE or not self.anchors:
            return []
        joined = " " + " ".join(words) + " "
        hits = []
        seen: set[tuple[str, ...]] = set()
        for i in range(len(words) - _SHINGLE + 1):
            sh = tuple(words[i : i + _SHINGLE])
            if sh in seen or sh not in self.anchors:
                continue
            seen.add(sh)
            for pattern, key, tag in self.anchors[sh]:
                if " " + pattern + " " in joined:
                    hits.append((key, tag))
        return hits


def _owned_texts(train_tasks: Iterable[Task], sessions: Mapping[str, Session] | None) -> Iterable[str]:
    """The texts train tasks own: instructions, user turns of their history sessions (each once)."""
    seen: set[str] = set()
    for t in train_tasks:
        if t.split == "test":
            continue
        yield t.instruction
        for ref in t.history:
            if ref.session_id in seen:
                continue
            seen.add(ref.session_id)
            s = (sessions or {}).get(ref.session_id)
            if s is not None:
                yield from (u.content for u in s.turns if u.role == "user")


def find_contamination(
    examples: Iterable[Any],
    test_tasks: Iterable[Task],
    sessions: Mapping[str, Session] | None = None,
    *,
    products: ProductsRule = "assistant",
    train_tasks: Iterable[Task] = (),
    train_match: TrainMatch = "contained",
) -> tuple[list[Contamination], list[Contamination], int]:
    """Every appearance of a test task in ``examples`` (objects with ``example_id``, ``task_id``
    and OpenAI-style ``messages``, e.g. :class:`~shopping_companion.sft.examples.StepExample`).

    ``sessions``: the benchmark's session pool, to check needle-session *text* (ids are always
    checked). ``products``: where a reference product id counts as a violation (module docstring).
    ``train_tasks``: a test text contained in a text they own (instructions, user turns of their
    history sessions), after normalisation, is not a finding (module docstring).
    Returns ``(violations, exposures, shared_with_train)``; exposures are reference
    products seen only in tool observations (empty when ``products="all"``: then they are
    violations); ``shared_with_train`` counts distinct test texts (instructions, needle turns,
    needle sentences) skipped because a train-owned text contains them.
    ``train_match``: ``contained`` (the rule above); ``whole_turn``, the earlier rule, kept to
    measure the difference (``benchmarks/bench_sft_decontam.py``): a test text is owned only when
    it equals a whole train text, and needle turns are not matched per sentence.
    Raises :class:`ConfigError` for an unknown ``products`` or ``train_match`` value.
    """
    if products not in PRODUCT_RULES:
        raise ConfigError(f"products: must be one of {', '.join(PRODUCT_RULES)}; got {products!r}")
    if train_match not in get_args(TrainMatch):
        raise ConfigError(f"train_match: must be one of {', '.join(get_args(TrainMatch))}; got {train_match!r}")
    contained = train_match == "contained"
    tests = [t for t in test_tasks if t.split == "test"]
    test_ids = {t.task_id for t in tests}
    # 1. every test text pattern: (normalised words, test task, kind, label)
    patterns: list[tuple[list[str], str, str, str]] = []
    id_map: dict[str, list[tuple[str, str]]] = defaultdict(list)  # id -> [(task, kind)]
    for t in tests:
        patterns.append((_norm_words(t.instruction), t.task_id, "instruction", "instruction"))
        for sid in t.needle_session_ids:
            id_map[sid].append((t.task_id, "needle_session"))
            s = (sessions or {}).get(sid)
            if s is None:
                continue
            for k, turn in enumerate(s.turns):
                if turn.role != "user":
                    continue
                label = f"text of {sid} turn {k}"
                w = _norm_words(turn.content)
                if len(w) >= MIN_NEEDLE_WORDS:
                    patterns.append((w, t.task_id, "needle_session", label))
                parts = [_norm_words(x) for x in split_sentences(turn.content)]
                if contained and len(parts) > 1:
                    patterns += [(p, t.task_id, "needle_session", label) for p in parts if len(p) >= MIN_NEEDLE_WORDS]
        if products != "none":
            for pid in t.reference_product_ids:
                id_map[pid].append((t.task_id, "reference_product"))
    # 2. which of them a train text contains: each train-owned text is scanned once through the
    # anchors of the distinct pattern texts not found yet
    owned_exact: set[str] = set()
    owned_texts: set[str] = set()
    anchors: dict[tuple[str, ...], set[str]] = defaultdict(set)
    if contained:
        for w, *_rest in patterns:
            if len(w) >= _SHINGLE:
                anchors[tuple(w[:_SHINGLE])].add(" ".join(w))
    for text in _owned_texts(train_tasks, sessions):
        words = _norm_words(text)
        owned_exact.add(" ".join(words))
        if not anchors or len(words) < _SHINGLE:
            continue
        joined = " " + " ".join(words) + " "
        for i in range(len(words) - _SHINGLE + 1):
            cands = anchors.get(tuple(words[i : i + _SHINGLE]))
            if not cands:
                continue
            found = {p for p in cands if " " + p + " " in joined}
            owned_texts |= found
            cands -= found
    # 3. the index of test texts no train text owns
    text_index = _TextIndex()
    shared_texts: set[tuple[str, str, str]] = set()
    for w, tid, kind, label in patterns:
        if " ".join(w) in owned_texts or " ".join(w) in owned_exact:
            shared_texts.add((tid, label, " ".join(w)))
        else:
            text_index.add(w, tid, kind, label)
    shared = len(shared_texts)
    odd_ids = [i for i in id_map if not _ID_TOKEN.fullmatch(i)]

    violations: list[Contamination] = []
    exposures: list[Contamination] = []
    cache: dict[int, tuple[list[tuple[str, str]], list[tuple[str, str, str]]]] = {}
    for ex in examples:
        found: dict[tuple[str, str, str], Contamination] = {}
        if ex.task_id in test_ids:
            found[(ex.task_id, "task_id", "")] = Contamination(
                example_id=ex.example_id, test_task_id=ex.task_id, kind="task_id", detail="collected on a test task"
            )
        for i, role, text in _message_texts(ex):
            h = hash((role, text))
            if h not in cache:
                tokens = _id_tokens(text) & id_map.keys()
                tokens |= {o for o in odd_ids if o in text}
                ids = [(tid, kind, tok) for tok in tokens for tid, kind in id_map[tok]]
                cache[h] = (text_index.find(text), ids)
            texts, ids = cache[h]
            hits = [(tid, *tag.split("\x00", 1)) for tid, tag in texts]  # (test task, kind, what matched)
            for tid, kind, tok in ids:
                if kind == "reference_product" and role != "assistant" and products == "assistant":
                    kind = "exposure"
                hits.append((tid, kind, repr(tok)))
            for tid, kind, what in hits:
                found.setdefault(
                    (tid, kind, what),
                    Contamination(
                        example_id=ex.example_id,
                        test_task_id=tid,
                        kind=kind,  # type: ignore[arg-type]
                        detail=f"{what} in message {i} ({role})",
                    ),
                )
        for f in found.values():
            (exposures if f.kind == "exposure" else violations).append(f)
    return violations, exposures, shared


def decontamination_report(
    tests: list[Task], n_examples: int, products: str, exposures: list[Contamination], shared: int
) -> dict[str, Any]:
    """The report of a passed check: ``test_tasks`` checked, ``examples`` checked, ``violations``
    (0), ``shared_with_train`` and ``exposures`` (count, test tasks and up to five findings)."""
    return {
        "test_tasks": len(tests),
        "examples": n_examples,
        "products_rule": products,
        "violations": 0,
        "shared_with_train": shared,
        "exposures": len(exposures),
        "exposure_tasks": sorted({e.test_task_id for e in exposures}),
        "exposure_examples": [json.loads(e.model_dump_json()) for e in exposures[:5]],
    }


def check_decontaminated(
    examples: list[Any],
    test_tasks: Iterable[Task],
    sessions: Mapping[str, Session] | None = None,
    *,
    products: ProductsRule = "assistant",
    train_tasks: Iterable[Task] = (),
) -> dict[str, Any]:
    """Raise :class:`ContaminationError` when any test task appears in ``examples``; otherwise
    return :func:`decontamination_report`."""
    tests = [t for t in test_tasks if t.split == "test"]
    violations, exposures, shared = find_contamination(
        examples, tests, sessions, products=products, train_tasks=train_tasks
    )
    if violations:
        raise ContaminationError(violations)
    return decontamination_report(tests, len(examples), products, exposures, shared)
