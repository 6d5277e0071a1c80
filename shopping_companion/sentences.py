"""Sentence splitting, written once for every module that cuts text into sentences.

A sentence ends after ``.``, ``!`` or ``?`` (and ``;`` with ``semicolons=True``) followed by
whitespace, or at a line break, except after an abbreviation's full stop: an initialism of two or
more letters ("U.S.", "e.g."), a title or company word ("Dr.", "St.", "Mr.", "Assn.", "Inc.",
"Ltd.", :data:`ABBREVIATIONS`), or "No." before a number. A mention of ``keep`` (case-insensitive)
is never split either, so a value's own full stops stay with it ("Levi Strauss & Co. Jeans").
Catalog descriptions often join sentences with no punctuation or space at all ("secured with a TSA
lockOne handle on the top"): :func:`separate_run_together` puts the full stop back.
Imports nothing of the package.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["ABBREVIATIONS", "ends_sentence", "separate_run_together", "split_sentences"]

#: Words that end with a full stop as an abbreviation, not a sentence (lower case, no dot).
ABBREVIATIONS = frozenset(
    "dr mr mrs ms mx prof st mt ft jr sr sen rev gen capt lt col sgt "
    "inc ltd co corp assn bros dept est intl mfg vs approx".split()
)

_BOUNDARY = re.compile(r"(?<=[.!?])\s+|\n+")
_BOUNDARY_SEMI = re.compile(r"(?<=[.!?;])\s+|\n+")
_LAST_WORD = re.compile(r"(?<![A-Za-z.])([A-Za-z.]*)\.$")
_INITIALISM = re.compile(r"(?:[A-Za-z]\.){2,}")
#: a word of two or more lower-case letters run into a capitalised word ("lockOne", "wheelsTwo"):
#: camel-case names start with a capital ("ThinkPad") or one lower-case letter ("iPhone", "eBay")
_RUN_TOGETHER = re.compile(r"(?<![A-Za-z])([a-z]{2,})([A-Z][a-z]+)")


def _is_abbreviation(head: str, rest: str) -> bool:
    """``head`` (text up to and including a full stop) ends with an abbreviation; ``rest`` is what
    follows the whitespace after it."""
    m = _LAST_WORD.search(head)
    if m is None:
        return False
    word = m.group(1) + "."
    if _INITIALISM.fullmatch(word):
        return True
    w = word[:-1].lower()
    return w in ABBREVIATIONS or (w == "no" and rest[:1].isdigit())


def split_sentences(text: str, keep: str = "", *, semicolons: bool = False) -> list[str]:
    """The sentences of ``text``, stripped, empty pieces dropped (module docstring for where a
    sentence ends). ``keep``: a string whose mentions are never split; ``semicolons``: ``;`` ends a
    sentence too."""
    if not text:
        return []
    value = keep.strip()
    spans = [m.span() for m in re.finditer(re.escape(value), text, re.IGNORECASE)] if value else []
    out, start = [], 0
    for m in (_BOUNDARY_SEMI if semicolons else _BOUNDARY).finditer(text):
        if any(a < m.start() < b for a, b in spans):
            continue
        dot = "\n" not in m.group() and text[m.start() - 1] == "."
        if dot and _is_abbreviation(text[max(0, m.start() - 32) : m.start()], text[m.end() : m.end() + 1]):
            continue
        out.append(text[start : m.start()])
        start = m.end()
    out.append(text[start:])
    return [x.strip() for x in out if x.strip()]


def ends_sentence(text: str) -> bool:
    """``text`` (stripped) ends with ``.``, ``!`` or ``?`` that closes a sentence: "Nice." does,
    "U.S. Polo Assn." and "Dr." do not."""
    t = text.strip()
    if not t or t[-1] not in ".!?":
        return False
    return t[-1] != "." or not _is_abbreviation(t, "")


@lru_cache(maxsize=4096)
def separate_run_together(text: str) -> str:
    """``text`` with a full stop and a space put back where two sentences were joined without
    punctuation: a word of two or more lower-case letters run into a capitalised word ("TSA
    lockOne handle" → "TSA lock. One handle"). Camel-case names are left alone: they open with a
    capital ("ThinkPad", "PlayStation") or with one lower-case letter ("iPhone", "eBay")."""
    if not text:
        return text
    return _RUN_TOGETHER.sub(r"\1. \2", text)
