"""ChatTokens' shared encode cache and Rust-backend fast path (trainers/episode.py), on the tiny
test tokenizer (byte-level BPE, Qwen special tokens)."""

from __future__ import annotations

import pytest

from shopping_companion.trainers import episode
from shopping_companion.trainers.episode import ChatTokens, clear_encode_caches
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
