"""ChatTokens' shared encode cache and Rust-backend fast path (trainers/chat_tokens.py), on the tiny
test tokenizer (byte-level BPE, Qwen special tokens)."""

from __future__ import annotations

import pytest

from shopping_companion.trainers import chat_tokens as episode
from shopping_companion.trainers.chat_tokens import ChatTokens, clear_encode_caches
from tests.tiny_model import TOOL_CHAT_TEMPLATE, build_tiny_model

TEXTS = [
    '\n<|im_start|>user\n<tool_response>\n{"results": [{"product_id": "a:1", "price": 12.5}]}\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
    "Caf\u00e9 \u2014 \u4e2d\u6587  two  spaces\ttab\n",
    "",
]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tok"), vocab_size=600))
    t.chat_template = TOOL_CHAT_TEMPLATE
    return t


def test_encode_equals_the_tokenizer_and_decodes_back(tok):
    chat = ChatTokens(tok)
    assert chat._backend is not None  # the fast path is taken for a plain byte-level BPE
    for text in TEXTS:
        ids, decoded = chat.encode_decoded(text)
        assert list(ids) == tok.encode(text, add_special_tokens=False)
        assert decoded == tok.decode(list(ids), skip_special_tokens=False) == text
        assert chat.encode(text) == list(ids)
    assert tok.convert_tokens_to_ids("<|im_end|>") in chat.encode(TEXTS[0])  # special tokens parsed


def test_cache_is_shared_per_tokenizer_and_callers_cannot_corrupt_it(tok):
    clear_encode_caches()
    a, b = ChatTokens(tok), ChatTokens(tok, {"enable_thinking": True})
    first = a.encode_decoded(TEXTS[0])
    assert b.encode_decoded(TEXTS[0]) is first  # one cache for every ChatTokens of this tokenizer
    got = a.encode(TEXTS[0])
    got.append(-1)
    got[0] = -2
    assert list(b.encode_decoded(TEXTS[0])[0]) == tok.encode(TEXTS[0], add_special_tokens=False)
    clear_encode_caches()
    assert a.encode_decoded(TEXTS[0]) is not first


def test_cache_can_be_disabled_and_rejects_negative_sizes(tok):
    off = ChatTokens(tok, encode_cache_size=0)
    x, y = off.encode_decoded(TEXTS[1]), off.encode_decoded(TEXTS[1])
    assert x == y and x is not y
    with pytest.raises(ValueError, match="encode_cache_size"):
        ChatTokens(tok, encode_cache_size=-1)


def test_lru_evicts_the_least_recently_used_entry():
    lru = episode._LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "a" is now the most recent
    lru.put("c", 3)
    assert lru.get("b") is None and lru.get("a") == 1 and lru.get("c") == 3 and len(lru) == 2


class _DisagreeingBackend:
    """A Rust backend stand-in whose ids differ from the tokenizer's own encode."""

    def __init__(self, real):
        self.real = real

    def encode(self, text, add_special_tokens=False):
        class E:
            ids = [7] * 3

        return E()

    def decode(self, ids, skip_special_tokens=False):
        return self.real.decode(ids, skip_special_tokens=skip_special_tokens)


class _Wrapped:
    """A tokenizer whose backend disagrees with it: ChatTokens must use the tokenizer's encode."""

    def __init__(self, tok):
        self.tok = tok
        self.backend_tokenizer = _DisagreeingBackend(tok.backend_tokenizer)
        self.eos_token_id, self.eos_token = tok.eos_token_id, tok.eos_token
        self.clean_up_tokenization_spaces = False
        self.all_special_tokens = tok.all_special_tokens

    def encode(self, text, add_special_tokens=False):
        return self.tok.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids, skip_special_tokens=False):
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)


def test_a_backend_that_disagrees_is_not_used(tok):
    chat = ChatTokens(_Wrapped(tok))
    assert chat._backend is None
    assert chat.encode(TEXTS[0]) == tok.encode(TEXTS[0], add_special_tokens=False)


def test_state_left_on_the_rust_tokenizer_by_other_calls_never_reaches_the_ids(tok):
    """tokenizer(...) with truncation / padding / split_special_tokens leaves that state on the Rust
    backend; tok.encode resets it, ChatTokens must give tok.encode's ids regardless."""
    text = TEXTS[0]
    want = tok.encode(text, add_special_tokens=False)
    for call in (
        dict(truncation=True, max_length=2),
        dict(padding="max_length", max_length=400),
        dict(split_special_tokens=True),
    ):
        clear_encode_caches()
        tok(text, **call)
        assert ChatTokens(tok).encode(text) == want, call
        clear_encode_caches()
    tok(text)  # leave the tokenizer as the other tests expect it


def test_added_tokens_invalidate_cached_encodings(tmp_path):
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "tok", vocab_size=600))
    chat = ChatTokens(t)
    text = "buy <NEWTOK> now"
    before = chat.encode(text)
    t.add_tokens(["<NEWTOK>"])
    after = ChatTokens(t).encode(text)
    assert after == t.encode(text, add_special_tokens=False) != before
    assert t.convert_tokens_to_ids("<NEWTOK>") in after


def test_a_tokenizer_class_that_overrides_encoding_keeps_its_own_encode(tok):
    from transformers import PreTrainedTokenizerFast

    class Shouting(type(tok)):
        def encode(self, text, *a, **k):
            return super().encode(text.upper(), *a, **k)

    loud = Shouting(tokenizer_object=tok.backend_tokenizer, eos_token=tok.eos_token)
    assert isinstance(loud, PreTrainedTokenizerFast)
    chat = ChatTokens(loud)
    assert chat._backend is None
    assert (
        chat.encode("shoes")
        == loud.encode("shoes", add_special_tokens=False)
        != tok.encode("shoes", add_special_tokens=False)
    )


def test_token_changes_that_keep_the_vocabulary_size_also_invalidate(tmp_path):
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "tok", vocab_size=600))
    text = "colour navy <|im_end|>"
    ChatTokens(t).encode(text)
    t.add_special_tokens({"additional_special_tokens": ["navy"]})  # already a word of the text: same size
    assert ChatTokens(t).encode(text) == t.encode(text, add_special_tokens=False)
    t.split_special_tokens = True
    assert ChatTokens(t).encode(text) == t.encode(text, add_special_tokens=False)
    assert t.convert_tokens_to_ids("<|im_end|>") not in ChatTokens(t).encode(text)


def test_a_tokenizer_class_that_overrides_decoding_keeps_its_own_decode(tok):
    class Loud(type(tok)):
        def decode(self, ids, *a, **k):
            return super().decode(ids, *a, **k).upper()

    loud = Loud(tokenizer_object=tok.backend_tokenizer, eos_token=tok.eos_token)
    chat = ChatTokens(loud)
    ids, text = chat.encode_decoded("navy shirt")
    assert chat._backend is None and text == loud.decode(list(ids), skip_special_tokens=False) == "NAVY SHIRT"


# --- pieces and the skipped round trip: token identity with the whole text's encode and decode ---

_FRAGMENTS = [
    ' "',
    '"',
    " ",
    "  ",
    "   ",
    "\n",
    "\n\n",
    " \n",
    "\t",
    "\r\n",
    "}",
    "{",
    "},",
    ", ",
    ": ",
    "[",
    "]",
    "navy",
    "Shirt",
    "cotton",
    "x",
    "'s",
    "'ll",
    "don't",
    "12",
    "3.5",
    "2024-01-14",
    "_id",
    "\\u00e9",
    "caf\u00e9",
    "cafe\u0301",
    "\u0301",
    "\u4e2d\u6587",
    "\U0001f600",
    "\u00a0",
    "\u3000",
    "\u2028",
    "\x1c",
    "\x85",
    "\u200b",
    "\u05e9\u05dc\u05d5\u05dd",
    "<|im_end|>",
    "<|im_start|>",
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "<tool_response>",
    "<|endoftext|>",
    "<",
    "|",
    '\\"',
    "\ufffd",
    "ﬁ",
    "Å",
    "A\u030a",
]


def _fuzz_texts(n: int, seed: int = 0) -> list[str]:
    """Texts made of fragments that stress the cuts: whitespace runs and newlines before and after
    ' "', combining marks (text that NFC changes), CJK, emoji, Unicode spaces, special and protocol
    tokens next to a cut; JSON-like texts; and one very long text."""
    import json
    import random

    rng = random.Random(seed)
    out = ["".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(1, 60))) for _ in range(n)]
    for k in range(n // 10):
        obj = {
            "results": [
                {rng.choice(_FRAGMENTS): rng.choice(_FRAGMENTS) * rng.randint(1, 3), "k": rng.random()}
                for _ in range(rng.randint(1, 8))
            ]
        }
        out.append(json.dumps(obj, ensure_ascii=bool(k % 2)))
    out.append(" ".join(out[: n // 2]) * 3)  # a very long text (hundreds of thousands of characters)
    return out


@pytest.fixture(scope="module")
def qwen_like():
    from tests.tiny_model import build_qwen_like_tokenizer

    return build_qwen_like_tokenizer(_fuzz_texts(400, seed=1) + TEXTS * 50, vocab_size=1500)


def test_pieces_join_back_and_cut_only_after_non_whitespace():
    for text in _fuzz_texts(300) + TEXTS:
        parts = episode._pieces(text)
        assert "".join(parts) == text
        for prev, part in zip(parts, parts[1:]):
            assert part.startswith(' "') and prev and not prev[-1].isspace()


def test_byte_level_bpe_tokenizers_take_the_piece_path(tok, qwen_like):
    assert episode._codec_traits(tok.backend_tokenizer) == (True, "always")
    assert episode._codec_traits(qwen_like.backend_tokenizer) == (True, "nfc")
    merged = [t for t in qwen_like.backend_tokenizer.get_vocab() if t.startswith("}") and t.endswith("Ċ")]
    assert merged  # the Qwen-like BPE merges across a cut-free boundary ("}\n"): the fuzz can tell


@pytest.mark.parametrize("which", ["tiny", "qwen_like"])
def test_piece_encoding_is_token_identical_to_the_whole_text(which, tok, qwen_like):
    """Proof by comparison: every fuzz text's ids (pieces, cache cold and warm) and decoded text
    equal the tokenizer's own encode and decode of the whole text."""
    t = tok if which == "tiny" else qwen_like
    texts = _fuzz_texts(3000, seed=2)
    assert max(map(len, texts)) > 200_000
    for round_ in range(2):  # cold piece cache, then every piece cached
        if round_ == 0:
            clear_encode_caches()
        chat = ChatTokens(t, encode_cache_size=1 if round_ else 4096)  # warm round: whole-text cache misses
        for text in texts:
            ids, decoded = chat.encode_decoded(text)
            want = t.encode(text, add_special_tokens=False)
            assert list(ids) == want, (which, text[:200])
            assert decoded == t.decode(want, skip_special_tokens=False), (which, text[:200])
    clear_encode_caches()


def test_the_decode_is_kept_where_the_round_trip_is_not_guaranteed(qwen_like):
    chat = ChatTokens(qwen_like)
    ids, decoded = chat.encode_decoded('{"name": "cafe\u0301"}')  # not NFC: the normalizer composes it
    assert decoded == '{"name": "caf\u00e9"}' == qwen_like.decode(list(ids), skip_special_tokens=False)
    assert chat.encode_decoded('{"name": "caf\u00e9"}')[1] == '{"name": "caf\u00e9"}'


def test_layouts_without_the_guarantees_encode_whole_texts(tmp_path):
    """Pieces are refused for a ByteLevel that adds a prefix space, a Split regex not known to be
    safe and an added token containing a space (decided again when tokens are added); the round
    trip for a normalizer other than NFC. The ids still equal the tokenizer's own."""
    from tokenizers import Regex, normalizers, pre_tokenizers
    from transformers import AutoTokenizer

    path = build_tiny_model(tmp_path / "tok", vocab_size=600)
    text = 'colour "navy" and "a b" {"k": "v"}'
    t = AutoTokenizer.from_pretrained(path)
    chat = ChatTokens(t)
    assert chat._codec(chat._vocab_stamp()) == (True, "always")
    t.add_tokens(["a b"])
    assert chat._codec(chat._vocab_stamp())[0] is False
    assert chat.encode(text) == t.encode(text, add_special_tokens=False)

    variants = {
        "prefix_space": lambda b: setattr(b, "pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=True)),
        "unknown_regex": lambda b: setattr(
            b,
            "pre_tokenizer",
            pre_tokenizers.Sequence(
                [
                    pre_tokenizers.Split(Regex(r"\S+\s*"), behavior="isolated"),
                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
                ]
            ),
        ),
        "lowercase": lambda b: setattr(b, "normalizer", normalizers.Lowercase()),
    }
    for name, change in variants.items():
        t = AutoTokenizer.from_pretrained(path)
        change(t.backend_tokenizer)
        pieces, round_trip = episode._codec_traits(t.backend_tokenizer)
        assert pieces is False and (round_trip is None or name != "lowercase"), name
        chat = ChatTokens(t)
        ids, decoded = chat.encode_decoded(text.upper())
        assert list(ids) == t.encode(text.upper(), add_special_tokens=False), name
        assert decoded == t.decode(list(ids), skip_special_tokens=False), name
