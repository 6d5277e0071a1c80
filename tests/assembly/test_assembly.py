"""The assembly floor's single homes: one ``scrub_url`` for reports, logs and the tool-service
client; one judge config (``JudgeSpec``, which a reward spec's ``RewardJudge`` extends) built and
pinged in one place, through the ``JUDGES`` registry, for the evaluation and the reward workers."""

from __future__ import annotations

import pytest

from shopping_companion.assembly.endpoints import scrub_url
from shopping_companion.assembly.judging import BoundedJudge, JudgeSpec, RewardJudge, build_judge, ping_judge
from shopping_companion.judges.cascade import CascadeJudge
from shopping_companion.judges.llm import LLMJudge
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.registry import JUDGES


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # credentials, query strings and fragments carry keys: never shown
        ("http://user:sk-secret@h.example:8000/v1?key=sk-secret#x", "http://h.example:8000/v1"),
        ("https://h.example/v1?api_key=sk-1", "https://h.example/v1"),
        ("http://:tok@h:80/", "http://h:80/"),
        # what the service client sends requests to stays a working URL: host as written, IPv6 kept
        ("http://u:p@[::1]:8000", "http://[::1]:8000"),
        ("http://Judge-Node:8000/v1", "http://Judge-Node:8000/v1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        (None, None),
        ("", ""),
        ("http://[::1", "<unparseable url>"),
    ],
)
def test_scrub_url(url, shown):
    assert scrub_url(url) == shown


def test_the_service_client_shows_and_uses_the_scrubbed_url():
    from shopping_companion.serve.client import ServiceClient

    client = ServiceClient("http://user:pw@[::1]:8000/")
    assert client.url == "http://[::1]:8000" and "pw" not in repr(client)


def _lookup(ids):
    return {}


def test_one_judge_config_for_eval_and_reward_spec():
    assert issubclass(RewardJudge, JudgeSpec)
    shared = set(JudgeSpec.model_fields)
    assert shared == {"kind", "cascade", "model", "base_url", "api_key_env"}
    assert set(RewardJudge.model_fields) - shared == {"max_in_flight", "timeout_s", "max_retries", "cache_path"}
    with pytest.raises(ValueError, match="--judge-model"):
        JudgeSpec(kind="llm")
    with pytest.raises(ValueError, match="served name"):
        RewardJudge(kind="llm")
    with pytest.raises(ValueError, match="http:// or https://"):
        JudgeSpec(kind="llm", model="m", base_url="ftp://h")


def test_build_judge_rule_through_the_registry():
    judge, desc = build_judge(JudgeSpec(), _lookup, {}, None, "credit")
    assert isinstance(judge, JUDGES.get("rule")) and isinstance(judge, RuleJudge) and judge.uncertain == "credit"
    assert desc == "rule (deterministic, offline; uncertain items: credit)"
    assert ping_judge(JudgeSpec()) == "rule (deterministic, offline)"  # nothing to ping


def test_build_judge_llm_for_the_eval_and_for_a_reward_spec(tmp_path, monkeypatch):
    monkeypatch.delenv("SHOPCOMP_DEADLINE_S", raising=False)
    monkeypatch.delenv("SHOPCOMP_BREAKER_THRESHOLD", raising=False)
    spec = JudgeSpec(kind="llm", model="m", base_url="http://u:p@127.0.0.1:9/v1")
    judge, desc = build_judge(spec, _lookup, {}, None, cache_path=tmp_path / "judge_cache.sqlite")
    assert isinstance(judge, CascadeJudge) and isinstance(judge.llm, LLMJudge)  # the eval: no bound
    assert desc == "rule, uncertain stages to llm: m at http://127.0.0.1:9/v1"
    assert (tmp_path / "judge_cache.sqlite").exists()
    # the eval's LLM judge keeps the judge's own HTTP settings (120 s attempts, 3 retries)
    assert (judge.llm.backend.timeout_s, judge.llm.backend.max_retries) == (120.0, 3)

    reward = RewardJudge(
        kind="llm", model="m", base_url="http://127.0.0.1:9/v1", cascade=False, max_in_flight=3, timeout_s=7
    )
    judge, desc = build_judge(reward, _lookup, {}, None)
    assert isinstance(judge, BoundedJudge) and judge.max_in_flight == 3 and isinstance(judge.inner, LLMJudge)
    assert desc == "llm: m at http://127.0.0.1:9/v1"
    # a reward worker fails fast at the HTTP level and lets the judge re-ask (max_retries)
    assert (judge.inner.backend.timeout_s, judge.inner.backend.max_retries, judge.inner.max_retries) == (7.0, 0, 2)
