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

Text that a train task legitimately owns is not a finding: an instruction identical to a train
task's instruction, or a needle turn (e.g. a templated filler line such as "Okay, I think I have
a plan now.") that also occurs in a session of a train task's history. Such shared texts are
counted in the report (``shared_with_train``) so a leaky benchmark is visible.

Matching is linear in the data: id-like tokens are intersected with the id sets, and text
patterns are found through 5-word shingle anchors and then verified by substring search, so the
paper's scale (thousands of examples over 200 test tasks) takes seconds.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any, Iterable, Literal, Mapping, get_args

from pydantic import BaseModel, ConfigDict

from shopping_companion.errors import ConfigError
from shopping_companion.types import Session, Task
from shopping_companion.errors import ContaminationError  # noqa: F401 - re-exported

__all__ = [
    "Contamination",
    "ContaminationError",
    "find_contamination",
    "check_decontaminated",
    "MIN_NEEDLE_WORDS",
    "PRODUCT_RULES",
    "ProductsRule",
]

MIN_NEEDLE_WORDS = 5
_SHINGLE = 5
_WORD = re.compile(r"[a-z0-9]+")
_ID_TOKEN = re.compile(r"[A-Za-z0-9:_.\-]+")

#: Where a reference product id counts as a violation (module docstring).
ProductsRule = Literal["assistant", "all", "none"]
#: Allowed values of :data:`ProductsRule`.
PRODUCT_RULES: tuple[str, ...] = get_args(ProductsRule)

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


def find_contamination(
    examples: Iterable[Any],
    test_tasks: Iterable[Task],
    sessions: Mapping[str, Session] | None = None,
    *,
    products: ProductsRule = "assistant",
    train_tasks: Iterable[Task] = (),
) -> tuple[list[Contamination], list[Contamination], int]:
    """Every appearance of a test task in ``examples`` (objects with ``example_id``, ``task_id``
    and OpenAI-style ``messages``, e.g. :class:`~shopping_companion.sft.examples.StepExample`).

    ``sessions``: the benchmark's session pool, to check needle-session *text* (ids are always
    checked). ``products``: where a reference product id counts as a violation (module docstring).
    ``train_tasks``: texts they own (instructions, user turns of their history sessions) are not
    findings. Returns ``(violations, exposures, shared_with_train)``; exposures are reference
    products seen only in tool observations (empty when ``products="all"``: then they are
    violations); ``shared_with_train`` counts test texts skipped because a train task owns them.
    Raises :class:`ConfigError` for an unknown ``products`` value.
    """
    if products not in PRODUCT_RULES:
        raise ConfigError(f"products: must be one of {', '.join(PRODUCT_RULES)}; got {products!r}")
    tests = [t for t in test_tasks if t.split == "test"]
    test_ids = {t.task_id for t in tests}
    owned: set[str] = set()
    for t in train_tasks:
        if t.split == "test":
            continue
        owned.add(" ".join(_norm_words(t.instruction)))
        for ref in t.history:
            s = (sessions or {}).get(ref.session_id)
            if s is not None:
                owned.update(" ".join(_norm_words(u.content)) for u in s.turns if u.role == "user")
    shared = 0
    text_index = _TextIndex()
    id_map: dict[str, list[tuple[str, str]]] = defaultdict(list)  # id -> [(task, kind)]
    for t in tests:
        words = _norm_words(t.instruction)
        if " ".join(words) in owned:
            shared += 1
        else:
            text_index.add(words, t.task_id, "instruction", "instruction")
        for sid in t.needle_session_ids:
            id_map[sid].append((t.task_id, "needle_session"))
            s = (sessions or {}).get(sid)
            if s is not None:
                for k, turn in enumerate(s.turns):
                    if turn.role == "user":
                        w = _norm_words(turn.content)
                        if len(w) >= MIN_NEEDLE_WORDS and " ".join(w) in owned:
                            shared += 1
                        elif len(w) >= MIN_NEEDLE_WORDS:
                            text_index.add(w, t.task_id, "needle_session", f"text of {sid} turn {k}")
        if products != "none":
            for pid in t.reference_product_ids:
                id_map[pid].append((t.task_id, "reference_product"))
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


def check_decontaminated(
    examples: list[Any],
    test_tasks: Iterable[Task],
    sessions: Mapping[str, Session] | None = None,
    *,
    products: ProductsRule = "assistant",
    train_tasks: Iterable[Task] = (),
) -> dict[str, Any]:
    """Raise :class:`ContaminationError` when any test task appears in ``examples``; otherwise
    return a report: ``test_tasks`` checked, ``examples`` checked, ``violations`` (0) and
    ``exposures`` (count, test tasks and one example each)."""
    tests = [t for t in test_tasks if t.split == "test"]
    violations, exposures, shared = find_contamination(
        examples, tests, sessions, products=products, train_tasks=train_tasks
    )
    if violations:
        raise ContaminationError(violations)
    return {
        "test_tasks": len(tests),
        "examples": len(examples),
        "products_rule": products,
        "violations": 0,
        "shared_with_train": shared,
        "exposures": len(exposures),
        "exposure_tasks": sorted({e.test_task_id for e in exposures}),
        "exposure_examples": [json.loads(e.model_dump_json()) for e in exposures[:5]],
    }
