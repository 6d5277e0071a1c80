"""User simulators: the corrective feedback between stage 1 and stage 2 (Shopping Companion §5.1,
§6.3, App. B.3; docs/architecture.md, the environment).

After stage 1 the agent hands its identified preferences to the user. In the ``two_stage`` mode a
simulator answers with one of three hint levels:

``none``
    no feedback; stage 2 starts directly (the RL-training setting). The simulator is not called.
``low``
    only *whether* the list has omissions and/or errors, never which ones.
``high``
    *which* preference keys (attribute names) are missing or wrong, never their values.

The truth comes from the judge's own stage-1 matching
(:func:`~shopping_companion.judges.rule.match_preferences`, one-to-one on slot, attribute, value
and polarity), so a preference the judge would count as found is never reported as missing.

Two simulators implement the :class:`UserSimulator` protocol:

:class:`ScriptedSimulator` (default, registered as ``"scripted"``)
    deterministic rules; the wording is chosen among a few phrasings by ``seed`` and the task id.
:class:`LLMSimulator` (registered as ``"llm"``; needs a :class:`~shopping_companion.llm.base.ChatBackend`)
    an LLM writes the message from our prompt, the gold preferences and the judge's check; every
    message is post-checked (:func:`find_value_leaks`, and for ``low`` also
    :func:`find_key_mentions`) and replaced by the scripted message when it would leak, is empty,
    or the backend fails. What happened is recorded in :class:`SimulatorFeedback`.

Both never reveal a gold value: keys whose name shares a word with the preference's value are
replaced by a neutral phrase, and the final message is checked for every gold value.

Custom simulators: any object with ``name``, ``model``, ``seed`` and
``feedback(task, identified_preferences, hint) -> str | None`` (optionally also ``respond(...) ->
SimulatorFeedback``), selected by ``EnvConfig.simulator`` as a name registered in
:data:`shopping_companion.registry.SIMULATORS`, a ``"module:attr"`` path or an entry point
(:func:`make_simulator`).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from shopping_companion.judges.rule import key_matches, match_preferences, normalize_tokens
from shopping_companion.llm.base import CircuitOpenError
from shopping_companion.types import Preference, Task

__all__ = [
    "Hint",
    "UserSimulator",
    "SimulatorFeedback",
    "PreferenceCheck",
    "check_preferences",
    "find_value_leaks",
    "find_key_mentions",
    "ScriptedSimulator",
    "LLMSimulator",
    "SIMULATORS",
    "BUILTIN_SIMULATORS",
    "make_simulator",
    "simulator_feedback",
    "describe_simulator",
]

Hint = Literal["none", "low", "high"]
#: Allowed values of :data:`Hint`.
HINTS: tuple[str, ...] = get_args(Hint)

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


@runtime_checkable
class UserSimulator(Protocol):
    """What the environment needs from a user simulator.

    ``name``: registry name (recorded with every result); ``model``: the LLM behind it or None;
    ``seed``: the seed it was built with or None. ``feedback`` returns the message that opens
    stage 2 after the preferences (None for ``hint="none"``); it must never contain a gold value.
    """

    name: str
    model: str | None
    seed: int | None

    def feedback(self, task: Task, identified_preferences: list[Preference] | None, hint: str) -> str | None: ...


@dataclass
class SimulatorFeedback:
    """One simulator answer and how it was produced (recorded in ``EpisodeResult.simulator``).

    ``text``: the message (None for ``hint="none"``). ``source``: ``"scripted"``, ``"llm"``, or
    ``"fallback"`` (an LLM answer was replaced by the scripted one). ``redacted``: the LLM message
    was rejected because it leaked a gold value (or, for ``low``, named a preference key).
    ``reason``: why a fallback happened. ``leaked_attributes``: the gold attributes whose value
    (or key) leaked. Token counts when the backend reports them.
    """

    text: str | None
    source: str = "scripted"
    redacted: bool = False
    reason: str | None = None
    leaked_attributes: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "feedback": self.text,
            "source": self.source,
            "redacted": self.redacted,
            "reason": self.reason,
            "leaked_attributes": list(self.leaked_attributes),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


# --------------------------------------------------------------------------- the check


@dataclass
class PreferenceCheck:
    """The judge-style comparison of identified vs gold preferences.

    ``missing``: gold preferences with no identified counterpart at all. ``wrong``: gold
    preferences the agent addressed (an unmatched identified preference with a matching key and
    slot) but got wrong (value or polarity). ``extra``: indices (into the identified list) of
    identified preferences matched to no gold one and not counted in ``wrong``. ``n_correct``:
    gold preferences matched.
    """

    missing: list[Preference]
    wrong: list[Preference]
    extra: list[int]
    n_correct: int

    @property
    def has_omissions(self) -> bool:
        return bool(self.missing or self.wrong)

    @property
    def has_errors(self) -> bool:
        return bool(self.wrong or self.extra)

    @property
    def perfect(self) -> bool:
        return not (self.missing or self.wrong or self.extra)


def check_preferences(task: Task, identified: list[Preference] | None) -> PreferenceCheck:
    """Compare ``identified`` (None = nothing identified) with ``task.preferences``.

    Gold ↔ identified matching is :func:`~shopping_companion.judges.rule.match_preferences` (the
    rule judge's m1). An unmatched gold preference is ``wrong`` when an unmatched identified
    preference has a matching key (:func:`key_matches`) and the same slot (any slot for
    single-product tasks), else ``missing``; each identified preference explains at most one.
    """
    ident = list(identified or [])
    gold = list(task.preferences)
    matches = match_preferences(task, ident).matches
    used = {j for j in matches if j is not None}
    single = task.n_products == 1
    missing: list[Preference] = []
    wrong: list[Preference] = []
    for g, j in zip(gold, matches):
        if j is not None:
            continue
        hit = next(
            (
                k
                for k, q in enumerate(ident)
                if k not in used and (single or q.slot == g.slot) and key_matches(g.attribute, q.attribute)
            ),
            None,
        )
        if hit is None:
            missing.append(g)
        else:
            used.add(hit)
            wrong.append(g)
    extra = [k for k in range(len(ident)) if k not in used]
    return PreferenceCheck(missing=missing, wrong=wrong, extra=extra, n_correct=sum(j is not None for j in matches))


# --------------------------------------------------------------------------- leak checks


def _phrase(text: str) -> str:
    return " " + " ".join(normalize_tokens(text)) + " "


def _mentions(message: str | None, task: Task, text_of: Callable[[Preference], str]) -> list[Preference]:
    """Gold preferences whose ``text_of(preference)`` occurs, as a phrase of normalised tokens, in
    ``message`` but not in the task instruction (a text with no tokens never occurs)."""
    if not message:
        return []
    msg = _phrase(message)
    instr = _phrase(task.instruction)
    out: list[Preference] = []
    for g in task.preferences:
        ph = _phrase(text_of(g))
        if ph.strip() and ph in msg and ph not in instr:
            out.append(g)
    return out


def find_value_leaks(message: str | None, task: Task) -> list[Preference]:
    """Gold preferences whose value appears in ``message``.

    A value appears when its normalised tokens (the rule judge's normalisation) occur as a
    contiguous phrase of the message's tokens. Values that already occur in the task instruction
    are public and ignored. Conservative by design: a value like ``"M"`` also matches the ``m``
    of ``I'm``; a false alarm only makes the simulator fall back to its scripted wording.
    """
    return _mentions(message, task, lambda g: g.value)


def find_key_mentions(message: str | None, task: Task) -> list[Preference]:
    """Gold preferences whose attribute name (underscores as spaces) appears as a phrase in
    ``message`` (the ``low`` hint must not say which dimension is wrong). Keys that occur in the
    task instruction are ignored."""
    return _mentions(message, task, lambda g: g.attribute.replace("_", " "))


#: Words that name a preference *dimension* rather than a value; a key may share them with its value
#: ("sleeve length" / "Short Sleeves") without revealing anything beyond the dimension.
_DIMENSION_WORDS = frozenset(
    """sleeve length size fit neck collar type pattern print color material style width height depth
    cm mm inch pack waist heel toe closure fastening rise shape finish occasion usage season gender
    age group weight capacity volume count piece set dial strap sole lining""".split()
)


def _key_leaks_value(attribute: str, value: str) -> bool:
    """True when naming the key would reveal (part of) the value: all the value's words are in
    the key, or the key shares a word (≥ 2 characters) with the value that is not a generic
    dimension word (:data:`_DIMENSION_WORDS`)."""
    kt = set(normalize_tokens(attribute.replace("_", " ")))
    vt = {t for t in normalize_tokens(value) if len(t) >= 2}
    if not vt:
        return False
    return vt <= kt or bool((kt & vt) - _DIMENSION_WORDS)


# --------------------------------------------------------------------------- scripted


_LOW = {
    "both": (
        "Not quite. Some of my preferences are missing from your list, and some of what you listed is wrong.",
        "That list needs work: it leaves out preferences I have, and it gets some things wrong.",
        "Careful: you have missed some of my preferences, and part of your list is not right either.",
    ),
    "omissions": (
        "What you listed is fine, but it is incomplete: you missed some of my preferences.",
        "Those are right, but there is more. Some of my preferences are not on your list.",
        "Good so far, but you have left out some of my preferences.",
    ),
    "errors": (
        "You covered everything I care about, but some of the preferences you listed are wrong.",
        "Nothing is missing, but part of your list is not what I want.",
        "All my preferences are there, but you also listed some that are not right.",
    ),
    "none_found": (
        "You did not find any of my preferences, and I did mention some in our earlier chats.",
        "Your list is empty, but I have told you about my preferences before.",
    ),
    "perfect": (
        "Yes, that is exactly what I prefer. Nothing is missing or wrong.",
        "That is right: those are my preferences, nothing missing and nothing wrong.",
    ),
}


def _pick(options: tuple[str, ...], seed: int | None, task_id: str, tag: str) -> str:
    if len(options) == 1 or seed is None:
        return options[0]
    h = hashlib.sha256(f"{seed}:{task_id}:{tag}".encode("utf-8", "replace")).digest()
    return options[random.Random(h).randrange(len(options))]


class ScriptedSimulator:
    """Deterministic, rule-based user simulator (the default; ``name="scripted"``, ``model=None``).

    ``seed`` (recorded) selects among a few equivalent phrasings per task, so agents do not see
    one fixed sentence; the same (seed, task, identified, hint) always gives the same text.
    """

    name = "scripted"
    model: str | None = None

    def __init__(self, seed: int | None = 0) -> None:
        self.seed = seed

    # ------------------------------------------------------------------ protocol

    def feedback(self, task: Task, identified_preferences: list[Preference] | None, hint: str) -> str | None:
        """The message for ``hint`` (``"none"`` → None). Raises ``ValueError`` for another hint."""
        return self.respond(task, identified_preferences, hint).text

    def respond(self, task: Task, identified_preferences: list[Preference] | None, hint: str) -> SimulatorFeedback:
        _check_hint(hint)
        if hint == "none":
            return SimulatorFeedback(text=None, source="scripted")
        return SimulatorFeedback(text=self._message(task, identified_preferences, hint), source="scripted")

    # ------------------------------------------------------------------ wording

    def _message(self, task: Task, identified: list[Preference] | None, hint: str) -> str:
        chk = check_preferences(task, identified)
        low = self._low(task, identified, chk)
        if hint == "low" or chk.perfect:
            text = low
        else:
            text = self._high(task, identified or [], chk)
        if find_value_leaks(text, task) or (hint == "low" and find_key_mentions(text, task)):
            # cannot happen with the templates above unless a gold value is an ordinary word of
            # them; fall back to the key-free wording, then to a neutral request.
            text = low
            if find_value_leaks(text, task):
                text = "Please check the preferences again before you go on."
        return text

    def _low(self, task: Task, identified: list[Preference] | None, chk: PreferenceCheck) -> str:
        if chk.perfect:
            kind = "perfect"
        elif not identified and task.preferences:
            kind = "none_found"
        elif chk.has_omissions and chk.has_errors:
            kind = "both"
        elif chk.has_omissions:
            kind = "omissions"
        else:
            kind = "errors"
        return _pick(_LOW[kind], self.seed, task.task_id, "low:" + kind)

    def _product(self, task: Task, slot: int) -> str:
        """' for the <product type>' for add-on tasks (neutral ordinal when the type would leak)."""
        if task.n_products == 1:
            return ""
        ordinal = _ORDINALS[slot] if 0 <= slot < len(_ORDINALS) else "other"
        if 0 <= slot < task.n_products:
            ptype = task.slots[slot].product_type.strip()
            if ptype and not find_value_leaks(ptype, task):
                return f" for the {ordinal} product ({ptype})"
        return f" for the {ordinal} product"

    def _key(self, g: Preference) -> str | None:
        """The gold key as words, or None when the key would give its value away."""
        if _key_leaks_value(g.attribute, g.value):
            return None
        words = " ".join(g.attribute.replace("_", " ").split())
        return words or None

    def _high(self, task: Task, identified: list[Preference], chk: PreferenceCheck) -> str:
        parts: list[str] = []
        if not identified and task.preferences:
            parts.append("You did not find any of my preferences.")
        # (gold preferences, sentence naming the key, sentence when the key would leak the value)
        for golds, keyed, unkeyed in (
            (
                chk.missing,
                "You missed my preference about {key}{product}.",
                "You missed one of my preferences{product}.",
            ),
            (
                chk.wrong,
                "What you wrote about {key}{product} is not what I want.",
                "One preference you listed{product} has the wrong value.",
            ),
        ):
            for g in golds:
                key = self._key(g)
                product = self._product(task, g.slot)
                parts.append(keyed.format(key=key, product=product) if key else unkeyed.format(product=product))
        for k in chk.extra:
            q = identified[k]
            ordinal = _ORDINALS[k] if k < len(_ORDINALS) else "one"
            key = " ".join(q.attribute.replace("_", " ").split())
            gold_like = find_value_leaks(key, task) or _key_leaks_value(q.attribute, q.value)
            if key and not gold_like and len(key) <= 60:
                parts.append(f"The preference you listed about {key} is not one of mine.")
            else:
                parts.append(f"The {ordinal} preference on your list is not one of mine.")
        parts.append("Everything else on your list is right." if chk.n_correct else "")
        return " ".join(p for p in parts if p)


# --------------------------------------------------------------------------- LLM


_LLM_SYSTEM = """\
You play a shopper who is chatting with a shopping assistant. The assistant has just read your \
earlier conversations and listed the preferences it believes you have for the current purchase. \
You know your real preferences (given below, together with an exact check of the assistant's \
list against them). Reply to the assistant in the first person, in one to three short sentences, \
as the shopper. Output only that reply: no preamble, no JSON, no tags.

Never state, quote, paraphrase, hint at or give examples of the value of any real preference \
(for example never say which colour, size, brand or material you want), not even partly. \
{level}"""

_LLM_LEVEL = {
    "low": (
        "Say only whether the list is correct, incomplete (some preferences are missing) and/or "
        "contains mistakes. Do not say which preferences are missing or wrong, and do not name "
        "any preference attribute such as colour or size."
    ),
    "high": (
        "Say which preference attributes (for example 'colour' or 'sleeve length', and for which "
        "product when there are several) are missing from the list or wrong in it, and which "
        "listed items are not preferences of yours. Name only the attributes, never their values."
    ),
}


def _llm_user(task: Task, identified: list[Preference] | None, chk: PreferenceCheck) -> str:
    gold = [p.model_dump() for p in task.preferences]
    listed = [p.model_dump() for p in (identified or [])]
    check = {
        "missing_attributes": [{"attribute": g.attribute, "slot": g.slot} for g in chk.missing],
        "wrong_attributes": [{"attribute": g.attribute, "slot": g.slot} for g in chk.wrong],
        "listed_items_that_are_not_preferences": [k + 1 for k in chk.extra],
        "correct_count": chk.n_correct,
    }
    products = [{"slot": i, "product": s.product_type} for i, s in enumerate(task.slots)]
    return (
        f"My shopping request: {task.instruction}\n"
        f"Products requested: {json.dumps(products, ensure_ascii=False)}\n"
        f"My real preferences (secret, never reveal values): {json.dumps(gold, ensure_ascii=False)}\n"
        f"The assistant's list: {json.dumps(listed, ensure_ascii=False)}\n"
        f"Exact check of the list: {json.dumps(check, ensure_ascii=False)}\n\n"
        "Write my reply to the assistant."
    )


_THINK_END = re.compile(r"</think>", re.IGNORECASE)
_TAGS = re.compile(r"</?(think|answer)>", re.IGNORECASE)


def _clean_llm_text(text: str) -> str:
    parts = _THINK_END.split(text or "")
    out = _TAGS.sub("", parts[-1]).strip()
    return " ".join(out.split())[:1500]


class LLMSimulator:
    """A user simulator written by an LLM (``name="llm"``).

    Args:
        backend: any :class:`~shopping_companion.llm.base.ChatBackend`; its ``model`` attribute
            (else ``name``) is recorded as ``model``.
        seed: sent as the sampling seed (recorded); default 0.
        sampling: sampling settings; default temperature 0, top-p 1, 256 tokens, ``seed``.
        fallback: the simulator used when the LLM answer is rejected (default
            :class:`ScriptedSimulator` with the same seed).

    The message is rejected — and the fallback's message used, with ``redacted``/``reason``
    recorded — when it contains a gold value (:func:`find_value_leaks`), for ``low`` when it
    names a gold attribute (:func:`find_key_mentions`), when it is empty, or when the backend
    raises — except :class:`~shopping_companion.llm.base.CircuitOpenError` (the simulator's
    endpoint is down), which propagates so the run stops instead of every episode silently
    using the fallback. Each call is bounded by the backend's own deadline (``OpenAIBackend``:
    ``deadline_s``).
    """

    name = "llm"

    def __init__(
        self, backend: Any, seed: int | None = 0, sampling: Any = None, fallback: ScriptedSimulator | None = None
    ):
        from shopping_companion.llm.base import Sampling

        self.backend = backend
        self.seed = seed
        self.model = str(getattr(backend, "model", None) or getattr(backend, "name", "unknown"))
        self.sampling = sampling or Sampling(temperature=0.0, top_p=1.0, top_k=None, max_tokens=256, seed=seed)
        self.fallback = fallback or ScriptedSimulator(seed=seed)

    def feedback(self, task: Task, identified_preferences: list[Preference] | None, hint: str) -> str | None:
        return self.respond(task, identified_preferences, hint).text

    def messages(self, task: Task, identified_preferences: list[Preference] | None, hint: str) -> list[dict[str, str]]:
        """The chat sent to the backend for ``hint`` (``low`` or ``high``)."""
        chk = check_preferences(task, identified_preferences)
        system = _LLM_SYSTEM.replace("{level}", _LLM_LEVEL[hint])
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": _llm_user(task, identified_preferences, chk)},
        ]

    def respond(self, task: Task, identified_preferences: list[Preference] | None, hint: str) -> SimulatorFeedback:
        _check_hint(hint)
        if hint == "none":
            return SimulatorFeedback(text=None, source="llm")
        fb_text = self.fallback.feedback(task, identified_preferences, hint)
        try:
            msg = self.backend.chat(self.messages(task, identified_preferences, hint), None, self.sampling)
        except CircuitOpenError:
            raise  # the endpoint is down: the run stops, instead of every episode silently falling back
        except Exception as e:  # BackendError or anything else: never break the episode
            return SimulatorFeedback(
                text=fb_text, source="fallback", reason=f"backend failed: {type(e).__name__}: {str(e)[:200]}"
            )
        pt, ct = getattr(msg, "prompt_tokens", None), getattr(msg, "completion_tokens", None)
        text = _clean_llm_text(getattr(msg, "content", "") or "")
        if not text:
            return SimulatorFeedback(
                text=fb_text, source="fallback", reason="empty LLM message", prompt_tokens=pt, completion_tokens=ct
            )
        leaks = find_value_leaks(text, task)
        keys = find_key_mentions(text, task) if hint == "low" else []
        if leaks or keys:
            why = []
            if leaks:
                why.append("the LLM message contained a gold preference value")
            if keys:
                why.append("the low-hint LLM message named a preference attribute")
            return SimulatorFeedback(
                text=fb_text,
                source="fallback",
                redacted=True,
                reason="; ".join(why),
                leaked_attributes=sorted({g.attribute for g in leaks + keys}),
                prompt_tokens=pt,
                completion_tokens=ct,
            )
        return SimulatorFeedback(text=text, source="llm", prompt_tokens=pt, completion_tokens=ct)


# --------------------------------------------------------------------------- registry


def _check_hint(hint: str) -> None:
    if hint not in HINTS:
        raise ValueError(f"hint: must be one of {', '.join(HINTS)}, got {hint!r}")


#: The built-in simulators; they are also registered in
#: :data:`shopping_companion.registry.SIMULATORS` when this module is imported.
BUILTIN_SIMULATORS: dict[str, Callable[..., Any]] = {"scripted": ScriptedSimulator, "llm": LLMSimulator}
SIMULATORS = BUILTIN_SIMULATORS  # backwards-compatible alias

try:  # the shared registry (names, "module:attr" paths, entry points of shopping_companion.simulators)
    from shopping_companion.registry import SIMULATORS as _REGISTRY

    for _name, _obj in BUILTIN_SIMULATORS.items():
        _REGISTRY.register(_name, _obj, replace=True)
except ImportError:  # pragma: no cover - registry module absent
    _REGISTRY = None


def _lookup(spec: str) -> Any:
    if _REGISTRY is not None:
        return _REGISTRY.get(spec)  # raises ConfigError (a ValueError) naming the known simulators
    if ":" in spec:  # pragma: no cover - registry module absent
        mod_name, _, attr = spec.partition(":")
        try:
            return getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"simulator {spec!r}: cannot load ({type(e).__name__}: {e})") from None
    if spec not in BUILTIN_SIMULATORS:  # pragma: no cover
        raise ValueError(f"simulator {spec!r}: unknown; known: {', '.join(sorted(BUILTIN_SIMULATORS))}")
    return BUILTIN_SIMULATORS[spec]


def make_simulator(spec: str | Any, seed: int | None = 0, **kwargs: Any) -> Any:
    """Build a simulator from a registered name (``"scripted"``; ``"llm"`` needs ``backend=``), a
    ``"module:attr"`` path or an entry point of group ``shopping_companion.simulators`` (resolved
    by :data:`shopping_companion.registry.SIMULATORS`). A class or factory is called with ``seed``
    (when it accepts it) and ``kwargs``; a ready instance, or any object that already has
    ``feedback``, is returned unchanged.

    Raises ``ValueError`` (:class:`~shopping_companion.errors.ConfigError`) for an unknown name or
    a bad dotted path, and ``ValueError`` when the object cannot be built or has no ``feedback``.
    """
    obj = _lookup(spec.strip()) if isinstance(spec, str) else spec
    if inspect.isclass(obj) or (callable(obj) and not hasattr(obj, "feedback")):
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            params = {}
        if "seed" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            kwargs = {"seed": seed, **kwargs}
        try:
            obj = obj(**kwargs)
        except TypeError as e:
            raise ValueError(f"simulator {spec!r}: cannot construct ({e})") from None
    if not callable(getattr(obj, "feedback", None)):
        raise ValueError(f"simulator {spec!r}: object has no feedback(task, identified_preferences, hint) method")
    return obj


def simulator_feedback(sim: Any, task: Task, identified: list[Preference] | None, hint: str) -> SimulatorFeedback:
    """Ask ``sim`` for feedback, using ``respond`` when it has one (richer record), else
    ``feedback``. A simulator exception is recorded, never raised: the episode goes on without
    feedback (``source="error"``). Custom simulators' messages are leak-checked too; a leaking
    message is dropped (``redacted=True``)."""
    try:
        if callable(getattr(sim, "respond", None)):
            out = sim.respond(task, identified, hint)
            if isinstance(out, SimulatorFeedback):
                return out
            text = getattr(out, "text", out)
        else:
            text = sim.feedback(task, identified, hint)
    except CircuitOpenError:
        raise  # an LLM simulator's endpoint is down: the run stops (not one episode's error)
    except Exception as e:
        return SimulatorFeedback(
            text=None, source="error", reason=f"simulator failed: {type(e).__name__}: {str(e)[:200]}"
        )
    text = None if text is None else str(text)
    leaks = find_value_leaks(text, task)
    if leaks:
        return SimulatorFeedback(
            text=None,
            source=str(getattr(sim, "name", "custom")),
            redacted=True,
            reason="the simulator message contained a gold preference value; dropped",
            leaked_attributes=sorted({g.attribute for g in leaks}),
        )
    return SimulatorFeedback(text=text, source=str(getattr(sim, "name", "custom")))


def describe_simulator(sim: Any) -> dict[str, Any]:
    """``{"name", "model", "seed"}`` of a simulator (recorded with every result)."""
    return {
        "name": str(getattr(sim, "name", type(sim).__name__)),
        "model": getattr(sim, "model", None),
        "seed": getattr(sim, "seed", None),
    }
