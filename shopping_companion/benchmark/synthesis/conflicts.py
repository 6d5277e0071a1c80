"""Rule-based detection of haystack statements that conflict with wanted features (§4 step 3,
preference denoising).

The paper lets an LLM read each session of the user's history and flag statements that contradict
the generated preferences. The rule detector below does the same for the conflicts that matter to
the judge, over the *user* turns of a session:

1. A **preference statement** is a sentence (split at ``. ! ?`` and newlines, at most 400
   characters) of a user turn with a first-person word (I, my, me, we, ...) and a preference cue:
   positive (prefer, love, like, always, usually, only, favourite, go for, wear, buy, ...) or
   negative (hate, dislike, can't stand, never, avoid, don't like, allergic, ...). A sentence with
   a negative cue counts as negative.
2. For a wanted feature ``label = value`` of slot *s*, a statement **conflicts** when
   (a) it names the wanted value within 60 characters after a negative cue (an aversion:
   "I can't stand navy blue");
   (b) it is positive, states another value of the same label that is not compatible with the
   wanted one (neither value's tokens contain the other's, and the value matcher does not read
   one as the other or a kind of it — "full sleeves" is long sleeves, navy a blue; values come
   from the catalog's vocabulary for that label), and it is about shopping for that kind of thing: it names the
   label, the slot's product type (or a synonym) or a clothing/shopping word — and it does not
   name only another slot's product type ("I always wear black" vs wanted colour navy);
   (c) it names the brand of slot *s*'s reference product within 60 characters after a negative
   cue (brand aversion);
   (d) it claims a size ("I'm a size M", "I wear size 9") that differs from the wanted size of the
   slot, or — when no size is wanted — that the reference product is not offered in, compared
   only within one size system (letters with letters, numbers with numbers).

   A statement whose turn names another requested product's type and not slot *s*'s is about that
   product and never conflicts with slot *s*'s features.
3. A **revision** is not a conflict. A sentence about a past preference (a past cue: "used to",
   "no longer", "not anymore", "changed my mind", "went off", "moved on from", "back then") states
   no preference of today and never gives an ``other_value`` conflict; and
   :func:`drop_superseded` drops the conflicts of a session dated before a session that states the
   wanted value with such a cue (an earlier value the user later revised, as in a
   ``knowledge_update`` task, where the gold is the latest value).

Tokens are the rule judge's normalised tokens. Each session's statements are extracted once and
cached by session id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from shopping_companion.judges.rule import normalize_tokens
from shopping_companion.sentences import split_sentences
from shopping_companion.types import Session

__all__ = [
    "Conflict",
    "ConflictDetector",
    "Statement",
    "WantedFeature",
    "contradicts",
    "drop_superseded",
    "is_revision",
]


def _cues(alternatives: str) -> re.Pattern[str]:
    """Case-insensitive whole-word regex for ``alternatives`` (``|``-separated regex fragments)."""
    return re.compile(rf"\b(?:{alternatives})\b", re.IGNORECASE)


_FIRST_PERSON = _cues(r"i|i'm|im|i've|i'd|i'll|my|me|myself|mine|we|our")
_POS = _cues(
    r"prefer\w*|love|loving|like|likes|always|usually|only|favou?rite|go for|stick (?:to|with)|"
    r"swear by|fan of|wear|wearing|buy|buying|choose|pick|obsessed|go-to"
)
_NEG = _cues(
    r"hate|hates|dislike|dislikes|can'?t stand|cannot stand|never|avoid|don'?t like|do not like|"
    r"not a fan|allergic|stay away|won'?t|refuse|can'?t wear|cannot wear|not into|sick of|tired of|"
    r"can'?t bear|loathe"
)
_PAST = _cues(
    r"used to|no longer|not any ?more|anymore|changed my mind|went off|gone off|moved on from|"
    r"back then|switched (?:from|away from)"
)
_SIZE_CLAIM = re.compile(
    r"\b(?:my size is|i(?:'m| am)(?: a)? size|i wear(?: a| an)? size|i take(?: a)? size|size)\s+"
    r"(?:(?:uk|us|eu|euro)\s?)?(xxs|xs|s|m|l|xl|xxl|xxxl|\d{1,2}(?:\.5)?)\b",
    re.IGNORECASE,
)
_CONTEXT_WORDS = (
    "wear wearing wore clothes clothing outfit wardrobe dress shoes shirt style fashion look buy "
    "bought shop shopping store brand colour color fabric material fit size"
)
_CONTEXT = frozenset(t for w in _CONTEXT_WORDS.split() for t in normalize_tokens(w))
_MAX_SENTENCE = 400


@dataclass(frozen=True)
class Statement:
    """A first-person preference sentence of a user turn (``tokens`` normalised).

    ``negative``: it has a negative cue; ``negated``: the normalised tokens of the text right
    after each negative cue (up to 60 characters), where an aversion names its object;
    ``scope``: tokens of the whole turn (of the sentence for turns over 2,000 characters), used to
    tell which requested product the statement is about; ``past``: it has a past cue (rule 3).
    """

    turn_index: int
    text: str
    tokens: tuple[str, ...]
    negative: bool
    negated: tuple[tuple[str, ...], ...] = ()
    scope: frozenset[str] = frozenset()
    past: bool = False


@dataclass(frozen=True)
class WantedFeature:
    """A wanted feature with what the detector needs about its slot.

    ``item_words``: normalised tokens naming only this slot's product type (and its synonyms),
    not the other slots'; ``other_item_words``: tokens naming only other slots' types;
    ``brand``: the slot's reference brand; ``sizes``: sizes the reference is offered in.
    """

    slot: int
    label: str
    value: str
    item_words: frozenset[str] = frozenset()
    other_item_words: frozenset[str] = frozenset()
    brand: str | None = None
    sizes: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.label}={self.value} (slot {self.slot})"


@dataclass(frozen=True)
class Conflict:
    """A haystack statement that contradicts a wanted feature.

    ``session_id``: the session (as given to the detector); ``kind``: ``aversion``,
    ``other_value``, ``brand_aversion``, ``size`` or ``llm``; ``detector``: ``rule`` or ``llm``.
    """

    session_id: str
    turn_index: int
    statement: str
    feature: str
    kind: str
    detector: str = "rule"

    def describe(self) -> str:
        text = self.statement if len(self.statement) <= 160 else self.statement[:157] + "..."
        return f"{self.kind}: {text!r} vs {self.feature} [turn {self.turn_index}]"


@lru_cache(maxsize=65536)
def _compatible(label: str, wanted: str, other: str) -> bool:
    """The value matcher reads ``other`` as the same value as ``wanted``, a narrower or a broader
    one (``"full sleeves"`` for long sleeves, ``"blue"`` for navy): not a contradiction."""
    from shopping_companion.judges.matching import default_matcher

    m = default_matcher()
    key = m.key(label)
    vocab = m.vocab_for(key)
    if vocab is None:
        return False
    a, b = vocab.find(wanted), vocab.find(other)
    return bool(a and b) and any(vocab.related(x, y) for x in a for y in b)


def _contains(hay: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    n = len(needle)
    if not n or n > len(hay):
        return False
    return any(hay[i : i + n] == needle for i in range(len(hay) - n + 1) if hay[i] == needle[0])


def _size_system(s: str) -> tuple[str, str] | None:
    s = s.strip().lower()
    m = re.search(r"\d{1,2}(?:\.5)?", s)
    if m:
        return "num", m.group(0)
    if re.fullmatch(r"x{0,3}[sml]|xxxl|3xl|xxl|xl", s):
        return "alpha", s
    return None


class ConflictDetector:
    """Rule-based conflict detection (module docstring).

    ``vocab``: label → set of normalised value token tuples known for that label (from
    :class:`~.catalog_view.CatalogView`). Cached statements per session id; reuse one detector
    for a whole build.
    """

    def __init__(self, vocab: dict[str, set[tuple[str, ...]]]) -> None:
        self.vocab = {k: sorted(v) for k, v in vocab.items()}
        self._by_first: dict[str, dict[str, list[tuple[str, ...]]]] = {}
        for label, values in self.vocab.items():
            idx: dict[str, list[tuple[str, ...]]] = {}
            for v in values:
                idx.setdefault(v[0], []).append(v)
            self._by_first[label] = idx
        self._cache: dict[str, list[Statement]] = {}

    def statements(self, session: Session, cache: bool = True) -> list[Statement]:
        """Preference statements of the user turns of ``session`` (cached by session id unless
        ``cache`` is False, e.g. for generated sessions whose id is reused across attempts)."""
        got = self._cache.get(session.session_id) if cache else None
        if got is not None:
            return got
        out: list[Statement] = []
        for ti, turn in enumerate(session.turns):
            if turn.role != "user":
                continue
            turn_scope: frozenset[str] | None = None
            for sent in split_sentences(turn.content):
                sent = sent.strip()
                if not sent or len(sent) > _MAX_SENTENCE or not _FIRST_PERSON.search(sent):
                    continue
                negs = tuple(normalize_tokens(sent[m.end() : m.end() + 60]) for m in _NEG.finditer(sent))
                if not negs and not _POS.search(sent) and not _SIZE_CLAIM.search(sent):
                    continue
                toks = normalize_tokens(sent)
                if turn_scope is None:
                    turn_scope = frozenset(normalize_tokens(turn.content)) if len(turn.content) <= 2000 else frozenset()
                past = bool(_PAST.search(sent))
                out.append(Statement(ti, sent, toks, bool(negs), negs, turn_scope or frozenset(toks), past))
        if cache:
            self._cache[session.session_id] = out
        return out

    def has_statements(self, session: Session) -> bool:
        return bool(self.statements(session))

    def find(
        self,
        session: Session,
        features: Sequence[WantedFeature],
        brands: Iterable[tuple[int, str]] = (),
        cache: bool = True,
    ) -> list[Conflict]:
        """Conflicts between ``session``'s statements and ``features``; ``brands`` are
        ``(slot, brand)`` pairs of the reference products (brand aversions); ``cache``: see
        :meth:`statements`."""
        stmts = self.statements(session, cache)
        if not stmts:
            return []
        out: list[Conflict] = []
        brand_toks = [(slot, b, normalize_tokens(b)) for slot, b in brands if b]
        for st in stmts:
            for f in features:
                c = self._check(st, f)
                if c:
                    out.append(Conflict(session.session_id, st.turn_index, st.text, f.describe(), c))
            if st.negative:
                for slot, b, bt in brand_toks:
                    if any(_contains(n, bt) for n in st.negated):
                        out.append(
                            Conflict(
                                session.session_id, st.turn_index, st.text, f"brand {b} (slot {slot})", "brand_aversion"
                            )
                        )
        return out

    # ------------------------------------------------------------------ rules

    def _check(self, st: Statement, f: WantedFeature) -> str | None:
        toks = set(st.tokens)
        mine = bool(st.scope & f.item_words)
        if st.scope & f.other_item_words and not mine:
            return None  # the statement is about another product of the request
        wanted = normalize_tokens(f.value)
        if f.label == "size" or f.sizes:
            kind = self._check_size(st, f)
            if kind:
                return kind
        if not wanted:
            return None
        if _contains(st.tokens, wanted):
            return "aversion" if any(_contains(n, wanted) for n in st.negated) else None
        if st.negative or st.past or f.label in ("size", "brand"):
            return None
        if not (mine or toks & set(normalize_tokens(f.label)) or toks & _CONTEXT):
            return None
        idx = self._by_first.get(f.label)
        if not idx:
            return None
        ws = set(wanted)
        for i, t in enumerate(st.tokens):
            for v in idx.get(t, ()):
                if st.tokens[i : i + len(v)] != v:
                    continue
                vs = set(v)
                if vs <= ws or ws <= vs or _compatible(f.label, f.value, " ".join(v)):
                    continue
                return "other_value"
        return None

    def _check_size(self, st: Statement, f: WantedFeature) -> str | None:
        m = _SIZE_CLAIM.search(st.text)
        if not m or st.negative:
            return None
        claim = _size_system(m.group(1))
        if claim is None:
            return None
        if f.label == "size":
            want = _size_system(f.value)
            if want and want[0] == claim[0] and want[1] != claim[1]:
                return "size"
            return None
        offered = [s for s in (_size_system(x) for x in f.sizes) if s and s[0] == claim[0]]
        if offered and claim not in offered:
            return "size"
        return None


def is_revision(text: str) -> bool:
    """Whether ``text`` has a past cue (rule 3 of the module docstring: "used to", "no longer",
    "these days", ...), i.e. can revise an earlier preference."""
    return bool(_PAST.search(text))


def drop_superseded(
    conflicts: Sequence[Conflict], dates: dict[str, str], revisions: dict[str, list[str]]
) -> list[Conflict]:
    """``conflicts`` less those revised later (rule 3): a conflict with feature ``f`` in a session
    dated before a session that revises ``f``. ``dates``: session id → ISO date;
    ``revisions``: :meth:`WantedFeature.describe` of ``f`` → ids of the sessions whose user turns
    state ``f``'s value in a revision (a turn with a past cue). A conflict in an undated session is kept."""
    out = []
    for c in conflicts:
        when = dates.get(c.session_id)
        later = [dates[r] for r in revisions.get(c.feature, []) if r in dates and r != c.session_id]
        if when is not None and any(d > when for d in later):
            continue
        out.append(c)
    return out


def contradicts(label: str, value: str, other: str) -> bool:
    """Whether ``other`` is a value of ``label`` that contradicts ``value``: the value matcher's
    vocabulary for ``label`` knows both, neither's tokens contain the other's, and neither is the
    other or a kind of it (``"blue"`` does not contradict navy). False when there is no vocabulary."""
    from shopping_companion.judges.matching import default_matcher

    a, b = set(normalize_tokens(value)), set(normalize_tokens(other))
    if not a or not b or a <= b or b <= a:
        return False
    m = default_matcher()
    vocab = m.vocab_for(m.key(label))
    if vocab is None or not vocab.find(value) or not vocab.find(other):
        return False
    return not _compatible(label, value, other)
