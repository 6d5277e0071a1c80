"""Token-level GRPO episodes over the real environment (real index, memory, rule judge, Eq. 12),
without verl: the policy is a scripted token generator (gold-knowing agent, plus a malformed turn),
the tokenizer is the tiny test tokenizer with a Qwen2.5-layout template."""

from __future__ import annotations

import asyncio
import json

import pytest

from shopping_companion.envs.scripted import GoldPolicy
from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, tool_schema
from shopping_companion.trainers.chat_tokens import ChatTokens
from shopping_companion.trainers.episode import Generation, run_row_episode
from tests.env_support import EnvKit, make_single_tasks
from tests.tiny_model import TOOL_CHAT_TEMPLATE, build_tiny_model


@pytest.fixture(scope="module")
def setup(tmp_path_factory, catalog_products, sgd_sessions, product_search, embedder):
    from transformers import AutoTokenizer

    tasks, pool = make_single_tasks(catalog_products, sgd_sessions, n=1, seed=11, haystack_size=10)
    kit = EnvKit(product_search, embedder, pool)
    res = kit.resources(tasks)
    tok = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tok")))
    tok.chat_template = TOOL_CHAT_TEMPLATE
    return res, tasks[0], tok


def _policy(tok, task, bad_first: bool = False):
    gold = GoldPolicy(task)

    async def generate(ids, sp):
        text = tok.decode(ids)
        stage_text = text[text.rfind("<|im_start|>system") :]
        turn = stage_text.count("<|im_start|>assistant") - 1
        names = MEMORY_TOOLS if '"name": "mem_search"' in stage_text.split("</tools>")[0] else PRODUCT_TOOLS
        if bad_first:
            if turn == 0:
                reply = '<tool_call>{"name": "product_search", "arguments": {"query": </tool_call>'  # broken JSON
            else:
                reply = gold.chat([{"role": "assistant"}] * (turn - 1), [tool_schema(n) for n in names]).content
        else:
            reply = gold.chat([{"role": "assistant"}] * turn, [tool_schema(n) for n in names]).content
        out = tok.encode(reply, add_special_tokens=False) + [tok.eos_token_id]
        return Generation(out[: sp["max_tokens"]])

    return generate


def _check_tokens(ep, tok, tools):
    chat = ChatTokens(tok)
    t = ep.tokens
    assert len(t.response_ids) == len(t.response_mask) == len(t.response_logprobs)
    text = chat.decode(t.prompt_ids + t.response_ids)
    last = max(i for i, m in enumerate(ep.messages) if m["role"] == "assistant")
    rendered = tok.apply_chat_template(ep.messages[: last + 1], tools=tools, tokenize=False)
    assert rendered == text + "\n"  # the environment's chat, token for token (plus the closing newline)
    assert ep.prefix_mismatches == 0
    # mask 1 exactly on the assistant turns' tokens
    gen = [i for i, m in enumerate(t.response_mask) if m == 1]
    asst = [m["content"] for m in ep.messages[: last + 1] if m["role"] == "assistant"]
    assert sum(len(tok.encode(a, add_special_tokens=False)) + 1 for a in asst) == len(gen)


def test_stage2_row_with_gold_stage1_then_scored_trajectory(setup):
    res, task, tok = setup
    env = res.make_env(task)
    ep = asyncio.run(run_row_episode(env, 2, ChatTokens(tok), _policy(tok, task), {}, 32768, stage1="gold"))
    assert ep.stage == 2 and ep.termination == "answered"
    assert ep.stage1["source"] == "gold" and ep.stage1["termination"] == "answered"
    assert json.loads(ep.messages[1]["content"].split("past conversations:\n")[1].split("\n\n")[0])["preferences"]
    _check_tokens(ep, tok, [tool_schema(n) for n in PRODUCT_TOOLS])
    c = ep.reward.components
    assert c["success"] == 1.0 and c["R_tool"] > 0 and c["R_fmt"] == 1.0
    assert ep.reward.total == pytest.approx(c["R_z"] + c["R_tool"] + c["R_fmt"])
    assert ep.extra_fields()["shopcomp_reward"]["total"] == ep.reward.total


def test_malformed_turn_is_an_observation_and_counts_in_the_format_reward(setup):
    res, task, tok = setup
    env = res.make_env(task)
    ep = asyncio.run(run_row_episode(env, 1, ChatTokens(tok), _policy(tok, task, bad_first=True), {}, 32768))
    assert ep.stage == 1 and ep.termination == "answered"
    assert "invalid JSON" in ep.messages[3]["content"]
    _check_tokens(ep, tok, [tool_schema(n) for n in MEMORY_TOOLS])
    assert ep.reward.components["f_tc"] == 0.0 and ep.reward.components["R_fmt"] < 1.0


def test_response_budget_ends_the_stage_and_still_scores_it(setup):
    res, task, tok = setup
    env = res.make_env(task)
    ep = asyncio.run(run_row_episode(env, 1, ChatTokens(tok), _policy(tok, task), {}, 120))
    assert ep.termination == "token_budget"
    assert len(ep.tokens.response_ids) <= 120
    assert ep.result is not None and ep.result.trajectory.termination == "token_budget"
    assert ep.reward.components["f_ans"] == 0.0


def test_bad_arguments_are_rejected_with_the_field_name(setup):
    res, task, tok = setup
    with pytest.raises(ValueError, match="stage1"):
        asyncio.run(run_row_episode(res.make_env(task), 2, ChatTokens(tok), _policy(tok, task), {}, 100, stage1="x"))
    with pytest.raises(ValueError, match="stage"):
        asyncio.run(run_row_episode(res.make_env(task), 3, ChatTokens(tok), _policy(tok, task), {}, 100))


def test_a_template_that_rewrites_past_turns_is_counted_not_fatal(setup):
    """A Qwen3-style template drops earlier turns' thinking when it renders the chat, so the token
    context (which keeps what the policy generated) no longer equals the rendering: each such
    observation is counted in ``prefix_mismatches`` and still appended as the difference between
    the renderings with and without it (mask 0), and the episode is scored as usual."""
    res, task, tok = setup
    drop_think = TOOL_CHAT_TEMPLATE.replace(
        "{%- else %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}",
        "{%- elif m.role == 'assistant' and not loop.last %}"
        "{{ '<|im_start|>assistant\n' + m.content.split('</think>')[-1].lstrip() + '<|im_end|>\n' }}"
        "{%- else %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}",
    )
    assert drop_think != TOOL_CHAT_TEMPLATE
    gold = GoldPolicy(task)
    names = [tool_schema(n) for n in PRODUCT_TOOLS]
    turn = [0]

    async def generate(ids, sp):
        reply = "<think>check the catalog</think>\n" + gold.chat([{"role": "assistant"}] * turn[0], names).content
        turn[0] += 1
        return Generation(tok.encode(reply, add_special_tokens=False) + [tok.eos_token_id])

    saved = tok.chat_template
    try:
        tok.chat_template = drop_think
        ep = asyncio.run(run_row_episode(res.make_env(task), 2, ChatTokens(tok), generate, {}, 32768, stage1="gold"))
    finally:
        tok.chat_template = saved
    assert ep.termination == "answered" and ep.reward.components["success"] == 1.0
    n_obs = sum(1 for m in ep.messages if m["role"] == "tool")
    assert n_obs >= 2 and ep.prefix_mismatches == n_obs
    # every generated turn is in the response with mask 1, observations with mask 0
    t = ep.tokens
    assert t.response_mask[0] == 1 and t.response_mask[-1] == 1 and 0 in t.response_mask
    gen = sum(t.response_mask)
    asst = [m["content"] for m in ep.messages if m["role"] == "assistant"]
    assert gen == sum(len(tok.encode(a, add_special_tokens=False)) + 1 for a in asst)


def test_observation_ids_equal_the_whole_text_encode_over_real_episodes(setup, catalog_products):
    """The piece-wise encode (trainers/chat_tokens.py ``_pieces``) and the skipped decode, proved on
    real observations: rows of both stages whose policy first makes searches with catalog title
    words (varied results: products, sessions, non-ASCII text), for the tiny tokenizer (GPT-2
    byte-level regex) and a Qwen2/Qwen3-laid-out one (NFC, Qwen2's Split regex) trained on these
    observations. Every text encoded equals the tokenizer's own encode and decode of it, and the
    episodes' token checks hold."""
    import random

    from shopping_companion.trainers import chat_tokens as episode
    from tests.tiny_model import build_qwen_like_tokenizer

    res, task, tok = setup
    words = sorted({w for p in catalog_products[:3000] for w in p.title.split() if len(w) > 3})
    seen: list[tuple[str, list[int], str]] = []

    class Recording(ChatTokens):
        def encode_decoded(self, text):
            ids, decoded = super().encode_decoded(text)
            seen.append((text, list(ids), decoded))
            return ids, decoded

    def policy(t, stage, rollout):
        gold = GoldPolicy(task)
        names = [tool_schema(n) for n in (MEMORY_TOOLS if stage == 1 else PRODUCT_TOOLS)]
        turn = [0]

        async def generate(ids, sp):
            k = turn[0]
            turn[0] += 1
            if k < 4:
                q = " ".join(random.Random(f"{stage}-{rollout}-{k}").sample(words, 3))
                call = (
                    {"name": "mem_search", "arguments": {"queries": [q, task.instruction], "top_k": 10}}
                    if stage == 1
                    else {"name": "product_search", "arguments": {"query": q, "top_k": 10}}
                )
                reply = "<think>look</think>\n<tool_call>" + json.dumps(call) + "</tool_call>"
            else:
                reply = gold.chat([{"role": "assistant"}] * (k - 4), names).content
            return Generation(t.encode(reply, add_special_tokens=False) + [t.eos_token_id])

        return generate

    def run(t):
        episode.clear_encode_caches()
        seen.clear()
        for stage in (1, 2):
            for rollout in range(4):
                ep = asyncio.run(
                    run_row_episode(res.make_env(task), stage, Recording(t), policy(t, stage, rollout), {}, 32768)
                )
                assert ep.termination == "answered" and ep.prefix_mismatches == 0
        return list(seen)

    tiny = run(tok)
    qwen = build_qwen_like_tokenizer([text for text, _, _ in tiny] * 3, vocab_size=2500)
    for t, records in ((tok, tiny), (qwen, run(qwen))):
        assert episode._codec_traits(t.backend_tokenizer)[0] is True
        assert len(records) >= 40 and any(not text.isascii() for text, _, _ in records)
        for text, ids, decoded in records:
            assert ids == t.encode(text, add_special_tokens=False)
            assert decoded == t.decode(ids, skip_special_tokens=False)


#: Qwen3's layout where it matters for incremental rendering: the last user query (not a wrapped
#: tool response) decides which assistant turns keep their thinking, a thinking block in the
#: content is re-laid out, consecutive tool messages share one user turn, and the generation
#: prompt of ``enable_thinking=False`` ends with an empty thinking block.
QWEN3_LAYOUT = (
    "{%- if messages[0].role == 'system' %}{%- set sys = messages[0].content %}{%- else %}{%- set sys = '' %}{%- endif %}"
    "{%- if tools %}{{ '<|im_start|>system\n' + (sys + '\n\n' if sys else '') + '# Tools\n\n<tools>' }}"
    "{%- for tool in tools %}{{ '\n' + (tool | tojson) }}{%- endfor %}{{ '\n</tools><|im_end|>\n' }}"
    "{%- elif sys %}{{ '<|im_start|>system\n' + sys + '<|im_end|>\n' }}{%- endif %}"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for m in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and m.role == 'user' and not (m.content.startswith('<tool_response>')"
    " and m.content.endswith('</tool_response>')) %}"
    "{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}"
    "{%- if ns.multi_step_tool %}{{ raise_exception('No user query found in messages.') }}{%- endif %}"
    "{%- for m in messages %}{%- set content = m.content %}"
    "{%- if m.role == 'user' or (m.role == 'system' and not loop.first) %}"
    "{{ '<|im_start|>' + m.role + '\n' + content + '<|im_end|>\n' }}"
    "{%- elif m.role == 'assistant' %}{%- set reasoning = '' %}"
    "{%- if '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning) %}"
    "{{ '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}"
    "{%- else %}{{ '<|im_start|>assistant\n' + content }}{%- endif %}{{ '<|im_end|>\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{%- endif %}"
    "{{ '\n<tool_response>\n' + content + '\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}{%- endif %}"
    "{%- endif %}"
)

#: rewrites the previous assistant turn once it is no longer the last message (as
#: ``test_a_template_that_rewrites_past_turns_is_counted_not_fatal``)
DROP_THINK = TOOL_CHAT_TEMPLATE.replace(
    "{%- else %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}",
    "{%- elif m.role == 'assistant' and not loop.last %}"
    "{{ '<|im_start|>assistant\n' + m.content.split('</think>')[-1].lstrip() + '<|im_end|>\n' }}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}",
)


def _fuzz_policy(tok, task, words, seed: str, thinking: str):
    """A policy that mixes, at random, searches with catalog title words (one to three calls per
    turn, so tool messages come in groups), broken JSON (an error observation), turns without a
    call (a user message: the environment's feedback), turns cut without a stop token, and
    ``thinking`` blocks laid out as ``"qwen3"`` writes them or ``"plain"``; after six turns it
    follows the gold path."""
    import random

    rng = random.Random(seed)
    gold = GoldPolicy(task)
    turns = {True: 0, False: 0}

    async def generate(ids, sp):
        text = tok.decode(ids)
        stage_text = text[text.rfind("<|im_start|>system") :]
        stage1 = '"name": "mem_search"' in stage_text.split("</tools>")[0]
        names = [tool_schema(n) for n in (MEMORY_TOOLS if stage1 else PRODUCT_TOOLS)]
        k = turns[stage1]
        turns[stage1] += 1
        think = "<think>\nlooking\n</think>\n\n" if thinking == "qwen3" else "<think>look</think>\n"
        kind = rng.choice(["search", "search", "search", "broken", "silent", "cut"]) if k < 6 else "gold"
        if kind == "gold":
            reply = gold.chat([{"role": "assistant"}] * (k - 6), names).content
        elif kind == "broken":
            reply = think + '<tool_call>{"name": "product_search", "arguments": {"query": </tool_call>'
        elif kind == "silent":
            reply = "Let me think about " + " ".join(rng.sample(words, 2))
        else:
            calls = []
            for _ in range(rng.randint(1, 3)):
                q = " ".join(rng.sample(words, 3))
                call = (
                    {"name": "mem_search", "arguments": {"queries": [q], "top_k": rng.randint(1, 10)}}
                    if stage1
                    else {"name": "product_search", "arguments": {"query": q, "top_k": rng.randint(1, 10)}}
                )
                calls.append("<tool_call>" + json.dumps(call, ensure_ascii=rng.random() < 0.5) + "</tool_call>")
            reply = think + "\n".join(calls)
        out = tok.encode(reply, add_special_tokens=False)
        if kind == "cut":  # a generation that used its whole max_tokens: no stop token
            return Generation(out[: max(1, len(out) // 2)])
        return Generation((out + [tok.eos_token_id])[: sp["max_tokens"]])

    return generate


@pytest.mark.parametrize("layout", ["qwen25", "qwen3", "qwen3_no_thinking", "drop_think", "clipped"])
def test_incremental_rendering_is_token_identical_to_whole_renders_over_real_episodes(
    layout, setup, catalog_products, monkeypatch
):
    """Proof by comparison for :meth:`ChatTokens.render_added`: real episodes of both stages
    (stage 1 played by the gold policy or by the fuzz policy) are run twice, rendering the whole
    chat every turn (``incremental=False``) and rendering only the new messages with no sampled
    comparison, and give the same prompt, response ids, mask, mismatch count and chat. Layouts:
    Qwen2.5's, Qwen3's (with and without thinking), one that rewrites past turns, and Qwen2.5's
    with an environment that clips old observations (``max_prompt_tokens``). Only the first two keep
    the context equal to the chat's rendering, so only there most observations are incremental
    (without thinking, Qwen3's generation prompt writes an empty thinking block that the rendered
    history leaves out: every observation is a mismatch, in both ways)."""
    from shopping_companion.trainers import chat_tokens as episode

    res, task, tok = setup
    words = sorted({w for p in catalog_products[:3000] for w in p.title.split() if len(w) > 3})
    words += ["caf\u00e9", "\u4e2d\u6587", "na\u00efve", "\U0001f600"]
    template, kwargs, thinking = {
        "qwen25": (TOOL_CHAT_TEMPLATE, {}, "plain"),
        "qwen3": (QWEN3_LAYOUT, {}, "qwen3"),
        "qwen3_no_thinking": (QWEN3_LAYOUT, {"enable_thinking": False}, "plain"),
        "drop_think": (DROP_THINK, {}, "plain"),
        "clipped": (TOOL_CHAT_TEMPLATE, {}, "plain"),
    }[layout]
    monkeypatch.setattr(episode, "_CHECK_FIRST", 0)  # no comparison: the incremental rendering alone
    monkeypatch.setattr(episode, "_CHECK_EVERY", 10**9)
    added = []

    class Counting(ChatTokens):
        def render_added(self, messages, k):
            got = super().render_added(messages, k)
            added.append(got is not None)
            return got

    saved = tok.chat_template
    tok.chat_template = template
    try:
        for stage, stage1, rollout in [
            (1, "gold", 0),
            (1, "gold", 1),
            (2, "gold", 2),
            (2, "policy", 3),
            (2, "policy", 4),
        ]:
            runs = []
            for incremental in (False, True):
                env = res.make_env(task)
                if layout == "clipped":
                    env.config.max_prompt_tokens = 1500
                chat = Counting(tok, kwargs, incremental=incremental)
                policy = _fuzz_policy(tok, task, words, f"{layout}-{stage}-{rollout}", thinking)
                runs.append(asyncio.run(run_row_episode(env, stage, chat, policy, {}, 4096, stage1=stage1)))
            whole, inc = runs
            for name in ("prompt_ids", "response_ids", "response_mask"):
                assert getattr(inc.tokens, name) == getattr(whole.tokens, name), (layout, stage, rollout, name)
            assert inc.prefix_mismatches == whole.prefix_mismatches, (layout, stage, rollout)
            assert inc.messages == whole.messages and inc.termination == whole.termination
    finally:
        tok.chat_template = saved
    if layout in ("qwen25", "qwen3"):  # the context stays the chat's rendering: most observations are incremental
        assert added.count(True) > 20
