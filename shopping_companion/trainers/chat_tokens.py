"""Token-in-token-out text for GRPO episodes: :class:`ChatTokens` renders a chat with the policy's
chat template and encodes what each turn adds (observations rendered from a short chat while that
stays token-identical to rendering the whole chat, spot-checked; pieces of repeated text cached per
tokenizer), so an episode never re-encodes its prefix (docs/grpo.md, token work). Used by
:mod:`shopping_companion.trainers.episode` and the verl and TRL rollouts."""

from __future__ import annotations

import json
import logging
import threading
import unicodedata
import weakref
from array import array
from collections import OrderedDict
from typing import Any, Callable

__all__ = ["ChatTokens", "clear_encode_caches", "stop_token_ids"]

logger = logging.getLogger(__name__)


class _LRU:
    """A thread-safe least-recently-used map of at most ``size`` entries. ``stamp`` is what the
    entries were computed under (the tokenizer's vocabulary size): a different stamp empties it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.stamp: Any = None
        self._d: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, stamp: Any = None) -> Any:
        with self._lock:
            if stamp != self.stamp:
                self._d.clear()
                self.stamp = stamp
                return None
            v = self._d.get(key)
            if v is not None:
                self._d.move_to_end(key)
            return v

    def put(self, key: str, value: Any, stamp: Any = None) -> None:
        with self._lock:
            if stamp != self.stamp:
                self._d.clear()
                self.stamp = stamp
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


class _Pieces:
    """A per-tokenizer map from text pieces (:func:`_pieces`) to their ids, shared by
    threads without a lock (a race at worst encodes a piece twice); emptied when it holds
    ``size`` pieces or when the vocabulary stamp changes (as :class:`_LRU`)."""

    def __init__(self, size: int = 1 << 16) -> None:
        self.size = size
        self.stamp: Any = None
        self.d: dict[str, list[int]] = {}

    def table(self, stamp: Any) -> dict[str, list[int]]:
        if stamp != self.stamp or len(self.d) >= self.size:
            self.d = {}
            self.stamp = stamp
        return self.d

    def clear(self) -> None:
        self.d = {}


_ENCODE_CACHES: "weakref.WeakKeyDictionary[Any, _LRU]" = weakref.WeakKeyDictionary()
_PIECE_CACHES: "weakref.WeakKeyDictionary[Any, _Pieces]" = weakref.WeakKeyDictionary()
_BACKEND_OK: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()
_CODECS: "weakref.WeakKeyDictionary[Any, tuple[Any, tuple[bool, str | None]]]" = weakref.WeakKeyDictionary()
#: the pre-tokenizer regexes under which every :func:`_pieces` cut is a pre-token boundary
#: (no alternative can run through a space that follows a non-space, and none looks behind):
#: Qwen2 / Qwen2.5 / Qwen3's Split pattern; GPT-2's is ByteLevel's own (``use_regex``)
_SPLIT_SAFE_REGEXES = frozenset(
    {r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"}
)
_ENCODE_CACHES_LOCK = threading.Lock()
#: per tokenizer: ``{(chat template, template kwargs): [observations rendered incrementally,
#: 1 while the incremental rendering is trusted]}`` (see :meth:`ChatTokens.check_due`)
_TEMPLATE_CHECKS: "weakref.WeakKeyDictionary[Any, dict[tuple[str, str], list[int]]]" = weakref.WeakKeyDictionary()
#: of a template's incremental renderings, the first ``_CHECK_FIRST`` and every
#: ``_CHECK_EVERY``-th after them are compared with the rendering of the whole chat
_CHECK_FIRST = 16
_CHECK_EVERY = 64
#: methods a tokenizer class must inherit unchanged from the fast-tokenizer base for its Rust
#: backend to stand in for ``encode`` / ``decode`` (a subclass overriding them may pre- or
#: post-process text)
_CODEC_METHODS = (
    "encode",
    "_encode_plus",
    "tokenize",
    "__call__",
    "convert_tokens_to_ids",
    "decode",
    "_decode",
    "batch_decode",
    "convert_ids_to_tokens",
)


def _per_tokenizer(registry: "weakref.WeakKeyDictionary[Any, Any]", tokenizer: Any, make: Callable[[], Any]) -> Any:
    """``registry``'s process-wide object for ``tokenizer``, made by ``make()`` on first use (a
    private one when the tokenizer cannot be weakly referenced)."""
    with _ENCODE_CACHES_LOCK:
        try:
            got = registry.get(tokenizer)
            if got is None:
                got = registry[tokenizer] = make()
        except TypeError:
            return make()
        return got


def _encode_cache(tokenizer: Any, size: int) -> _LRU:
    """The process-wide encode cache of ``tokenizer``. Its size is that of the first
    ``ChatTokens`` made for the tokenizer."""
    return _per_tokenizer(_ENCODE_CACHES, tokenizer, lambda: _LRU(size))


def _piece_cache(tokenizer: Any) -> _Pieces:
    """The process-wide piece cache of ``tokenizer``."""
    return _per_tokenizer(_PIECE_CACHES, tokenizer, _Pieces)


def _backend_agrees(tok: Any, backend: Any) -> bool:
    """Whether ``backend.encode`` gives ``tok.encode``'s ids: the tokenizer class inherits the
    encode methods of the fast-tokenizer base unchanged, does not clean up tokenisation spaces, and
    a probe with every special and added token plus mixed text encodes identically."""
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:  # pragma: no cover - transformers is a dependency of the trainers
        return False
    if not isinstance(tok, PreTrainedTokenizerFast) or getattr(tok, "clean_up_tokenization_spaces", False):
        return False
    for name in _CODEC_METHODS:
        if getattr(type(tok), name, None) is not getattr(PreTrainedTokenizerFast, name, None):
            return False
    specials = list(getattr(tok, "all_special_tokens", None) or [])
    added = getattr(tok, "added_tokens_decoder", None) or {}
    specials += [getattr(t, "content", str(t)) for t in added.values()]
    joined = " x".join(dict.fromkeys(str(t) for t in specials))
    probe = f'{joined}Probe: caf\u00e9  \u2014 {{"a": [1, 2]}}\n\t{joined} \u4e2d\u6587 end'
    try:
        return list(backend.encode(probe, add_special_tokens=False).ids) == list(
            tok.encode(probe, add_special_tokens=False)
        )
    except Exception:  # noqa: BLE001 - any backend oddity: use the tokenizer's own encode
        return False


def _pieces(text: str, sep: str = ' "') -> list[str]:
    """``text`` cut before every ``sep`` (a space, then a double quote: before the members and
    strings of the observations' JSON) that follows a character that is not whitespace; the
    pieces join to ``text``. Python's whitespace includes all of Unicode's White_Space, so that
    character is not whitespace for a tokenizer's regex either (:func:`_codec_traits`)."""
    parts = text.split(sep)
    out = [parts[0]]
    for part in parts[1:]:
        prev = out[-1]
        if prev and not prev[-1].isspace():
            out.append(sep + part)
        else:
            out[-1] = prev + sep + part
    return out


def _state(component: Any) -> dict[str, Any] | None:
    """The JSON settings of a ``tokenizers`` component (normalizer, pre-tokenizer, decoder)."""
    if component is None:
        return None
    return json.loads(component.__getstate__())


def _codec_traits(backend: Any) -> tuple[bool, str | None]:
    """``(pieces, round_trip)`` of a Rust tokenizer that stands in for the tokenizer's encode.

    ``pieces``: cutting a text with :func:`_pieces` and joining the pieces' ids gives the
    text's ids. True for a byte-level BPE whose steps all act within a cut's sides: normalizer none
    or NFC (a space composes with nothing), pre-tokenizer GPT-2's ByteLevel regex or a Split with
    a regex of :data:`_SPLIT_SAFE_REGEXES` followed by a regex-free ByteLevel, neither adding a
    prefix space; BPE without dropout, word prefixes or suffixes; added tokens that contain no
    whitespace and strip nothing (so none spans a cut or absorbs the space of one).

    ``round_trip``: when ``decode(encode(text)) == text`` is guaranteed: ``"always"`` (byte-level
    BPE with every byte in the vocabulary, a ByteLevel decoder, added tokens of printable ASCII,
    no normalizer), ``"nfc"`` (the same with an NFC normalizer: for texts already in NFC), else
    None (decode to find out)."""
    try:
        model = backend.model
        if type(model).__name__ != "BPE" or model.dropout or model.byte_fallback:
            return False, None
        if model.continuing_subword_prefix or model.end_of_word_suffix:
            return False, None
        norm, pre, dec = _state(backend.normalizer), _state(backend.pre_tokenizer), _state(backend.decoder)
        if norm is None:
            norm_kind = "always"
        elif norm.get("type") == "NFC":
            norm_kind = "nfc"
        else:
            return False, None
        steps = pre.get("pretokenizers", []) if pre and pre.get("type") == "Sequence" else [pre]
        byte_level = steps[-1] if steps and steps[-1] and steps[-1].get("type") == "ByteLevel" else None
        if byte_level is None or byte_level.get("add_prefix_space"):
            return False, None
        if len(steps) == 1:
            split_ok = bool(byte_level.get("use_regex"))
        else:
            sp = steps[0]
            split_ok = (
                len(steps) == 2
                and not byte_level.get("use_regex")
                and sp.get("type") == "Split"
                and sp.get("behavior") == "Isolated"
                and not sp.get("invert")
                and (sp.get("pattern") or {}).get("Regex") in _SPLIT_SAFE_REGEXES
            )
        from tokenizers import pre_tokenizers

        vocab = backend.get_vocab(with_added_tokens=False)
        all_bytes = all(c in vocab for c in pre_tokenizers.ByteLevel.alphabet())
        added = [(str(t.content), t) for t in backend.get_added_tokens_decoder().values()]
        added_ok = all(
            not any(ch.isspace() for ch in c) and not (t.lstrip or t.rstrip or t.single_word) for c, t in added
        )
        # an added token decodes to its content through the ByteLevel decoder only when its
        # characters are ones that decoder maps to themselves (printable ASCII)
        added_ascii = all(all("!" <= ch <= "~" for ch in c) for c, _ in added)
        byte_dec = dec is not None and dec.get("type") == "ByteLevel"
        round_trip = norm_kind if all_bytes and byte_dec and added_ascii else None
        return split_ok and added_ok, round_trip
    except Exception:  # noqa: BLE001 - an unknown backend layout: encode whole texts and decode them
        return False, None


def stop_token_ids(tokenizer: Any) -> list[int]:
    """The ids that end an assistant turn: the tokenizer's EOS id(s), then ``<|im_end|>`` when the
    vocabulary has it (ChatML templates end every turn with it, also where EOS is another token)."""
    eos = tokenizer.eos_token_id
    out = [int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None]
    try:
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    except Exception:  # noqa: BLE001 - a tokenizer-like object without the method
        im_end = None
    unk = getattr(tokenizer, "unk_token_id", None)
    if isinstance(im_end, int) and im_end != unk and im_end not in out:
        out.append(im_end)
    return out


def clear_encode_caches() -> None:
    """Empty every tokenizer's shared encode cache in this process (e.g. between benchmark steps,
    so that a step gets no cache hits from the same prompts in an earlier step)."""
    with _ENCODE_CACHES_LOCK:
        caches = list(_ENCODE_CACHES.values()) + list(_PIECE_CACHES.values())
    for cache in caches:
        cache.clear()


class ChatTokens:
    """Chat-template rendering and tokenisation for one tokenizer.

    ``render(messages, tools, add_generation_prompt)`` returns the template's text;
    ``encode(text)`` its ids (special tokens in the text are parsed, none added);
    ``decode(ids)`` the exact text of ids (special tokens kept); ``content(ids)`` the text the
    environment receives as the assistant's message (see :meth:`content`).
    ``chat_template_kwargs`` go to ``apply_chat_template`` (e.g. ``{"enable_thinking": True}``).

    Encodings are cached per tokenizer object, shared by every ``ChatTokens`` of that tokenizer in
    the process (verl builds one agent loop, hence one ``ChatTokens``, per trajectory): the n
    rollouts of a prompt start from the same prompt text and often view the same products, so
    about 40% of the observation text of a GRPO step repeats (``benchmarks/bench_grpo_env.py``).
    ``encode_cache_size`` texts are kept (least recently used evicted; 0 disables the cache and
    the piece cache of :meth:`encode_decoded`, which holds up to 65,536 pieces per tokenizer).

    ``incremental``: an episode's observations are rendered with :meth:`render_added` (only the
    new messages) while its token context equals the template's rendering of its chat; False:
    the whole chat is rendered every turn.
    """

    def __init__(
        self,
        tokenizer: Any,
        chat_template_kwargs: dict[str, Any] | None = None,
        encode_cache_size: int = 4096,
        incremental: bool = True,
    ) -> None:
        if encode_cache_size < 0:
            raise ValueError(f"encode_cache_size: must be >= 0, got {encode_cache_size}")
        self.tok = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})
        self._cache = _encode_cache(tokenizer, encode_cache_size) if encode_cache_size else None
        self._pieces = _piece_cache(tokenizer) if encode_cache_size else None
        self.eos_ids: set[int] = set(stop_token_ids(tokenizer))
        self.eos_text: str = tokenizer.eos_token or ""
        self._tail: str | None = None
        self.incremental = incremental
        self._head: tuple[list[dict[str, Any]], str] | None = None

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, add_generation_prompt: bool
    ) -> str:
        return self.tok.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False, **self.kwargs
        )

    def render_added(self, messages: list[dict[str, Any]], k: int) -> str | None:
        """The text the template writes for ``messages[k:]`` and the generation prompt after
        ``messages[:k]`` rendered with the generation prompt, from a short chat: the system
        message, the last user message before ``k``, then ``messages[k:]`` (no tool schemas).

        Equal to the whole chat's rendering minus that of ``messages[:k]`` for templates that
        render a message from itself, its neighbours, the system message and the last user
        message (Qwen2.5 and Qwen3 layouts, proved over real episodes in
        ``tests/trainers/test_grpo_episode.py``); :meth:`check_due` samples the others.
        None when the short chat's rendering does not extend that of its first messages with
        the generation prompt, or the template refuses it."""
        head: list[dict[str, Any]] = []
        if k > 0 and messages[0].get("role") == "system":
            head.append(messages[0])
        for m in reversed(messages[len(head) : k]):
            if m.get("role") == "user":
                head.append(m)
                break
        try:
            cached = self._head
            if cached is not None and cached[0] == head:
                opened = cached[1]
            else:
                opened = self.render(head, None, True)
                self._head = (head, opened)
            text = self.render(head + messages[k:], None, True)
        except Exception:  # noqa: BLE001 - a template that refuses the short chat: render the whole one
            return None
        return text[len(opened) :] if text.startswith(opened) else None

    def _template_check(self) -> list[int]:
        """The shared ``[count, trusted]`` of this tokenizer's chat template and kwargs."""
        checks = _per_tokenizer(_TEMPLATE_CHECKS, self.tok, dict)
        key = (str(getattr(self.tok, "chat_template", None)), json.dumps(self.kwargs, sort_keys=True, default=str))
        got = checks.get(key)
        if got is None:
            got = checks.setdefault(key, [0, 1])
        return got

    def incremental_trusted(self) -> bool:
        """Whether :meth:`render_added` may stand in for the whole chat's rendering: ``incremental``
        is on and no comparison (:meth:`check_due`) found a difference for this template."""
        return self.incremental and bool(self._template_check()[1])

    def check_due(self) -> bool:
        """Count one incremental rendering of this template (per tokenizer, template and kwargs, in
        this process) and say whether it must also be compared with the whole chat's: the first
        16, then every 64th."""
        check = self._template_check()
        check[0] += 1
        return check[0] <= _CHECK_FIRST or check[0] % _CHECK_EVERY == 0

    def distrust_incremental(self) -> None:
        """Render the whole chat every turn from now on for this template (a comparison found a
        difference); logged once."""
        check = self._template_check()
        if check[1]:
            check[1] = 0
            logger.warning(
                "the chat template renders a chat's new messages differently from the whole chat: "
                "rendering the whole chat every turn from now on (template kwargs %s)",
                self.kwargs,
            )

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens written in it are parsed, none added); a new list."""
        return list(self.encode_decoded(text)[0])

    def encode_decoded(self, text: str) -> tuple[array, str]:
        """``(ids, decode(ids))`` of ``text``: the ids (an ``array("i")``, read-only by convention:
        it may be the cached object) and the exact text they decode to (equal to ``text`` for
        byte-level BPE; kept separately because other tokenizers may normalise).

        With the Rust backend of a byte-level BPE (:func:`_codec_traits`), the text is encoded as
        :func:`_pieces`, each piece's ids cached per tokenizer (the observations of one step share
        most of their JSON members: the same products, sessions and keys), so only new pieces are
        encoded; and the decode is skipped where the round trip is guaranteed."""
        cache = self._cache
        backend = self._backend
        stamp = self._vocab_stamp() if cache is not None or backend is not None else None
        if cache is not None:
            hit = cache.get(text, stamp)
            if hit is not None:
                return hit
        fast = backend is not None and self._backend_state_is_plain(backend)
        pieces, round_trip = self._codec(stamp) if fast else (False, None)
        pieces = pieces and self._pieces is not None
        if fast:
            if pieces:
                table = self._pieces.table(stamp)
                new: dict[str, list[int]] = {}
                out: list[int] = []
                for piece in _pieces(text):
                    got = table.get(piece)
                    if got is None:
                        got = new.get(piece)
                        if got is None:
                            got = new[piece] = backend.encode(piece, add_special_tokens=False).ids
                    out += got
                ids = array("i", out)
            else:
                ids = array("i", backend.encode(text, add_special_tokens=False).ids)
            if not self._backend_state_is_plain(backend):  # another thread set state meanwhile
                fast = False
            elif pieces:
                table.update(new)
        if not fast:
            ids = array("i", self.tok.encode(text, add_special_tokens=False))
            cache = None if backend is not None else cache  # a racing state change: do not keep it
            round_trip = None
        if round_trip == "always" or (round_trip == "nfc" and unicodedata.is_normalized("NFC", text)):
            out_pair = (ids, text)
        else:
            decoded = self.decode(ids.tolist())
            out_pair = (ids, text if decoded == text else decoded)  # one string object when they are equal
        if cache is not None:
            cache.put(text, out_pair, stamp)
        return out_pair

    def _vocab_stamp(self) -> tuple:
        """What encodings depend on besides the text: the vocabulary size with added tokens, the
        added tokens themselves (content and flags) and ``split_special_tokens``. Any change drops
        the cached encodings made before it."""
        split = bool(getattr(self.tok, "split_special_tokens", False))
        b = getattr(self.tok, "backend_tokenizer", None)
        if b is not None:
            try:
                added = b.get_added_tokens_decoder()
                return (
                    int(b.get_vocab_size(with_added_tokens=True)),
                    len(added),
                    hash(
                        tuple(
                            sorted(
                                (
                                    i,
                                    str(t),
                                    bool(getattr(t, "special", False)),
                                    bool(getattr(t, "lstrip", False)),
                                    bool(getattr(t, "rstrip", False)),
                                    bool(getattr(t, "single_word", False)),
                                    bool(getattr(t, "normalized", False)),
                                )
                                for i, t in added.items()
                            )
                        )
                    ),
                    split,
                )
            except Exception:  # noqa: BLE001
                pass
        try:
            return (len(self.tok), split)
        except TypeError:  # a tokenizer-like object without a size: entries are kept as they are
            return (-1, split)

    def _backend_state_is_plain(self, b: Any) -> bool:
        """True when the Rust tokenizer carries no truncation, padding or special-token splitting
        left by an earlier ``tokenizer(...)`` call (``tok.encode`` resets those; the backend does not)."""
        return (
            getattr(b, "truncation", None) is None
            and getattr(b, "padding", None) is None
            and bool(getattr(b, "encode_special_tokens", False))
            == bool(getattr(self.tok, "split_special_tokens", False))
        )

    def decode(self, ids: list[int]) -> str:
        backend = self._backend
        if backend is not None:  # the Rust tokenizer directly: no per-id Python conversion
            return backend.decode(list(ids), skip_special_tokens=False)
        return self.tok.decode(ids, skip_special_tokens=False)

    def _codec(self, stamp: Any) -> tuple[bool, str | None]:
        """:func:`_codec_traits` of the Rust backend (which must be set), decided once per
        tokenizer object and vocabulary ``stamp`` (an added token may change them)."""
        try:
            got = _CODECS.get(self.tok)
        except TypeError:
            got = None
        if got is not None and got[0] == stamp:
            return got[1]
        traits = _codec_traits(self._backend)
        try:
            _CODECS[self.tok] = (stamp, traits)
        except TypeError:
            pass
        return traits

    @property
    def _backend(self) -> Any:
        """The fast tokenizer's Rust backend when it may stand in for ``tok.encode`` /
        ``tok.decode`` (:func:`_backend_agrees`, decided once per tokenizer object), else None."""
        if not hasattr(self, "_backend_cache"):
            b = getattr(self.tok, "backend_tokenizer", None)
            if b is not None:
                try:
                    ok = _BACKEND_OK.get(self.tok)
                except TypeError:
                    ok = None
                if ok is None:
                    ok = _backend_agrees(self.tok, b)
                    try:
                        _BACKEND_OK[self.tok] = ok
                    except TypeError:
                        pass
                b = b if ok else None
            self._backend_cache = b
        return self._backend_cache

    def content(self, ids: list[int]) -> str:
        """The assistant message the environment receives: the generated text exactly, special
        tokens included (so the environment's chat re-renders to the same ids), minus the
        trailing stop (EOS) token(s)."""
        end = len(ids)
        while end > 0 and ids[end - 1] in self.eos_ids:
            end -= 1
        return self.decode(ids[:end])

    @property
    def assistant_tail(self) -> str:
        """The text the template writes after an assistant message's content (``<|im_end|>\\n``
        for Qwen templates), found by rendering a probe conversation."""
        if self._tail is None:
            probe = "\u2063probe\u2063"
            msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "content": probe}]
            text = self.render(msgs, None, False)
            i = text.rfind(probe)
            self._tail = text[i + len(probe) :] if i >= 0 else self.eos_text
        return self._tail
