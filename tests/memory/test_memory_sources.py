"""Session loaders for LongMemEval, Topical-Chat, LoCoMo (and SGD's skip mode): real files from
../shared/data where they exist, small files in the exact release formats written by the tests
otherwise (LongMemEval is not available here). Offline, CPU."""

from __future__ import annotations

import gzip
import json
import re
import warnings
import zipfile
from pathlib import Path

import pytest

from shopping_companion.memory.loaders import (
    LOCOMO_RELATIVE_PATH,
    TOPICALCHAT_RELATIVE_PATH,
    DataWarning,
    LoadReport,
    SessionPool,
    load_locomo,
    load_longmemeval,
    load_sessions,
    load_sgd,
    load_topicalchat,
    parse_locomo_datetime,
    parse_longmemeval_datetime,
)
from shopping_companion.paths import resolve_data_dir

# --------------------------------------------------------------------------- dates


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("1:56 pm on 8 May, 2023", ("2023-05-08", "2023-05-08T13:56")),
        ("12:09 am on 13 September, 2023", ("2023-09-13", "2023-09-13T00:09")),
        ("12:30 pm on 1 January, 2024", ("2024-01-01", "2024-01-01T12:30")),
        ("10:04 AM on 29 Feb 2024", ("2024-02-29", "2024-02-29T10:04")),
        ("1:56 pm on 30 February, 2023", None),  # not a real day
        ("13:56 pm on 8 May, 2023", None),
        ("8 May 2023", None),
        (None, None),
    ],
)
def test_parse_locomo_datetime(text, expect) -> None:
    assert parse_locomo_datetime(text) == expect


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("2023/05/20 (Sat) 02:21", ("2023-05-20", "2023-05-20T02:21")),
        ("2023/5/2 (Tue) 23:40", ("2023-05-02", "2023-05-02T23:40")),
        ("2023/05/20", ("2023-05-20", "2023-05-20")),
        ("2023/13/20 (Sat) 02:21", None),
        ("2023/05/20 (Sat) 25:21", None),
        ("May 20, 2023", None),
        (20230520, None),
    ],
)
def test_parse_longmemeval_datetime(text, expect) -> None:
    assert parse_longmemeval_datetime(text) == expect


# --------------------------------------------------------------------------- Topical-Chat


def test_topicalchat_real_file() -> None:
    path = resolve_data_dir() / TOPICALCHAT_RELATIVE_PATH
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        raw = json.load(fh)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)  # a clean file must not warn
        sessions, rep = load_topicalchat()
    assert len(sessions) == len(raw) == 539
    assert rep.records == 539 and rep.sessions == 539 and rep.n_problems == 0
    assert sum(len(s.turns) for s in sessions) == sum(len(r["content"]) for r in raw.values()) == 11760
    first_id = next(iter(raw))
    s0 = sessions[0]
    assert s0.session_id == f"topicalchat:{first_id}" and s0.source == "topicalchat"
    assert s0.date is None
    assert s0.turns[0].content == raw[first_id]["content"][0]["message"].strip()
    # the mapping is per agent, so roles follow the file's agents exactly (agent_1 -> user)
    for s, r in zip(sessions, raw.values()):
        assert [t.role for t in s.turns] == ["user" if m["agent"] == "agent_1" else "assistant" for m in r["content"]]
        assert s.turns[0].role == "user"


def _write_topicalchat(tmp_path: Path) -> Path:
    data = {
        "t_ok": {
            "article_url": "u",
            "config": "A",
            "conversation_rating": {},
            "content": [
                {
                    "message": "Do you like jazz?",
                    "agent": "agent_1",
                    "sentiment": "Neutral",
                    "knowledge_source": ["FS1"],
                    "turn_rating": "Good",
                },
                {
                    "message": "  ",
                    "agent": "agent_2",
                    "sentiment": "Neutral",
                    "knowledge_source": [],
                    "turn_rating": "Good",
                },
                {
                    "message": "Yes, mostly bebop.",
                    "agent": "agent_2",
                    "sentiment": "Happy",
                    "knowledge_source": [],
                    "turn_rating": "Good",
                },
                {
                    "message": "Who is your favourite?",
                    "agent": "agent_3",
                    "sentiment": "Neutral",
                    "knowledge_source": [],
                    "turn_rating": "Good",
                },
            ],
        },
        "t_bad": {"config": "B"},
        "t_int": {"content": [{"message": 5, "agent": "agent_1"}]},
    }
    p = tmp_path / "tc.json"
    p.write_text(json.dumps(data))
    return p


def test_topicalchat_counts_bad_records_and_warns(tmp_path: Path) -> None:
    p = _write_topicalchat(tmp_path)
    with pytest.warns(DataWarning, match="topicalchat"):
        sessions, rep = load_topicalchat(p)
    assert [s.session_id for s in sessions] == ["topicalchat:t_ok"]
    assert [(t.role, t.content) for t in sessions[0].turns] == [
        ("user", "Do you like jazz?"),
        ("assistant", "Yes, mostly bebop."),
    ]
    assert rep.records == 3 and rep.sessions == 1
    assert rep.dropped == {"malformed": 1, "no_turns": 1}
    assert rep.turns_dropped == {"empty": 1, "unknown_agent": 1, "malformed_turn": 1}
    assert any("agent_3" in e for e in rep.examples)
    with pytest.raises(ValueError, match=r"tc\.json\['t_ok'\] turn 3: unknown_agent"):
        load_topicalchat(p, on_error="raise")


# --------------------------------------------------------------------------- LoCoMo


def test_locomo_real_zip() -> None:
    path = resolve_data_dir() / LOCOMO_RELATIVE_PATH
    raw = {}
    with zipfile.ZipFile(path) as z:
        for n in z.namelist():
            if n.endswith(".json"):
                raw[f"conv-{Path(n).stem}"] = json.loads(z.read(n))
    data = load_locomo()
    sessions, users = data  # a 2-tuple, with .report
    rep = data.report
    assert rep.n_problems == 0 and rep.notes == {}
    assert len(users) == 10 and len(sessions) == 272 == rep.sessions
    n_turns = sum(len(v) for c in raw.values() for k, v in c.items() if re.fullmatch(r"session_\d+", k))
    assert sum(len(s.turns) for s in sessions) == n_turns == 5882
    pool = SessionPool(sessions)
    for u in users:
        conv = raw[u.meta["sample_id"]]
        assert u.meta["user_speaker"] == conv["speaker_a"]
        assert u.meta["assistant_speaker"] == conv["speaker_b"]
        nums = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
        assert u.session_ids == [f"{u.user_id}:{n}" for n in nums]
        dates = [r.date for r in u.history]
        assert dates == sorted(dates)  # chronological
        for n, ref in zip(nums, u.history):
            s = pool[ref.session_id]
            assert s.date == ref.date == parse_locomo_datetime(conv[f"session_{n}_date_time"])[0]
            turns = conv[f"session_{n}"]
            assert [t.role for t in s.turns] == [
                "user" if t["speaker"] == conv["speaker_a"] else "assistant" for t in turns
            ]
            for mine, orig in zip(s.turns, turns):
                assert mine.content.startswith(orig["text"].strip())
                assert ("[shared an image: " in mine.content) == ("blip_caption" in orig)
    s1 = pool["locomo:conv-26:1"]
    assert s1.date == "2023-05-08" and s1.source == "locomo"
    # without captions the text is exactly the corpus's text
    plain, _ = load_locomo(image_captions=False)
    assert not any("[shared an image" in t.content for s in plain for t in s.turns)


def _locomo_conv(extra_session: dict | None = None) -> dict:
    conv = {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "9:00 am on 2 March, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I started pottery classes."},
            {
                "speaker": "Ben",
                "dia_id": "D1:2",
                "text": "Nice! Here is my bowl.",
                "img_url": ["x"],
                "blip_caption": "a photo of a blue bowl",
            },
            {"speaker": "Cy", "dia_id": "D1:3", "text": "hello"},
        ],
        "session_2_date_time": "sometime in March",
        "session_2": [{"speaker": "Ana", "dia_id": "D2:1", "text": "dated badly"}],
        "session_10_date_time": "7:15 pm on 1 April, 2023",
        "session_10": [
            {"speaker": "Ben", "dia_id": "D10:1", "text": "   "},
            {"speaker": "Ana", "dia_id": "D10:2", "text": "Glazing today."},
        ],
        "session_3_date_time": "8:00 pm on 20 March, 2023",
        "session_3": [{"speaker": "Ben", "dia_id": "D3:1", "text": "How did it go?"}],
    }
    conv.update(extra_session or {})
    return conv


def test_locomo_standard_json_counts_problems(tmp_path: Path) -> None:
    """The single-file release format: [{sample_id, conversation, qa, ...}]."""
    recs = [
        {"sample_id": "conv-1", "conversation": _locomo_conv(), "qa": []},
        {"sample_id": "conv-1", "conversation": _locomo_conv(), "qa": []},  # repeated id
        {"sample_id": "conv-2", "conversation": {"speaker_a": "Solo", "speaker_b": "Solo"}},
    ]
    p = tmp_path / "locomo10.json"
    p.write_text(json.dumps(recs))
    with pytest.warns(DataWarning, match="locomo"):
        data = load_locomo(p)
    sessions, users = data
    assert [s.session_id for s in sessions] == [
        "locomo:conv-1:1",
        "locomo:conv-1:3",
        "locomo:conv-1:10",
    ]  # numeric session order
    assert [s.date for s in sessions] == ["2023-03-02", "2023-03-20", "2023-04-01"]
    assert sessions[0].turns[1].content == "Nice! Here is my bowl. [shared an image: a photo of a blue bowl]"
    assert [t.role for t in sessions[0].turns] == ["user", "assistant"]
    assert [(u.user_id, len(u.history)) for u in users] == [("locomo:conv-1", 3)]
    rep = data.report
    assert rep.records == 3 and rep.sessions == 3
    assert rep.dropped == {"bad_date": 1, "duplicate_id": 1, "malformed": 1}
    assert rep.turns_dropped == {"unknown_speaker": 1, "empty": 1}
    with pytest.raises(ValueError, match=r"session_1 turn 2: unknown_speaker"):
        load_locomo(p, on_error="raise")


def test_locomo_directory_of_conversation_files(tmp_path: Path) -> None:
    d = tmp_path / "locomo"
    d.mkdir()
    (d / "7.json").write_text(json.dumps(_locomo_conv()))
    (d / "8.json").write_text("{not json")
    with pytest.warns(DataWarning):
        data = load_locomo(d)
    assert [u.user_id for u in data.users] == ["locomo:conv-7"]
    assert [s.session_id for s in data.sessions] == ["locomo:conv-7:1", "locomo:conv-7:3", "locomo:conv-7:10"]
    assert data.report.records == 2
    assert data.report.dropped == {"bad_date": 1, "malformed": 1}  # 8.json is not JSON
    with pytest.raises(ValueError, match=r"7\.json session_1 turn 2: unknown_speaker"):
        load_locomo(d, on_error="raise")


# --------------------------------------------------------------------------- LongMemEval


def _lme_session(*turns: tuple[str, str, bool]) -> list[dict]:
    out = []
    for role, content, ans in turns:
        t = {"role": role, "content": content}
        if ans:
            t["has_answer"] = True
        out.append(t)
    return out


SHARED = _lme_session(
    ("user", "Can you suggest a pasta recipe with mushrooms?", False),
    ("assistant", "Try a creamy mushroom tagliatelle.", False),
)
WEATHER = _lme_session(
    ("user", "Will it rain in Lisbon this weekend?", False), ("assistant", "Showers are likely on Saturday.", False)
)
ANSWER_1 = _lme_session(
    ("user", "I just adopted a beagle named Pixel.", True),
    ("assistant", "Congratulations on Pixel!", False),
    ("user", "She loves carrots.", False),
)


def _lme_instances() -> list[dict]:
    return [
        {
            "question_id": "q_001",
            "question_type": "single-session-user",
            "question": "What is the name of my dog?",
            "answer": "Pixel",
            "question_date": "2023/05/30 (Tue) 23:40",
            "haystack_session_ids": ["sharegpt_a_0", "answer_q001_1", "ultrachat_7"],
            "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 10:00", "2023/05/22 (Mon) 18:45"],
            "haystack_sessions": [SHARED, ANSWER_1, WEATHER],
            "answer_session_ids": ["answer_q001_1"],
        },
        {
            "question_id": "q_002",
            "question_type": "temporal-reasoning",
            "question": "How many days ago did I ask about rain?",
            "answer": 3,
            "question_date": "2023/07/01 (Sat) 09:00",
            # the shared session again at another date; an id conflict; a bad date; an empty turn
            "haystack_session_ids": ["ultrachat_7", "sharegpt_a_0", "sharegpt_b_1", "answer_x"],
            "haystack_dates": [
                "2023/06/01 (Thu) 08:00",
                "2023/06/10 (Sat) 12:00",
                "June 12th",
                "2023/06/20 (Tue) 07:30",
            ],
            "haystack_sessions": [
                WEATHER,
                _lme_session(
                    ("user", "A different text under a reused id.", False),
                    ("assistant", "", False),
                    ("system", "be brief", False),
                ),
                SHARED,
                _lme_session(("user", "I asked about rain a while ago.", True)),
            ],
            "answer_session_ids": ["answer_x", "answer_missing"],
        },
        {
            "question_id": "q_003",
            "question": "broken",
            "haystack_session_ids": ["a"],
            "haystack_dates": [],
            "haystack_sessions": [[]],
        },
        "not an instance",
    ]


def test_longmemeval_exact_format(tmp_path: Path) -> None:
    p = tmp_path / "longmemeval_s.json"
    p.write_text(json.dumps(_lme_instances()))
    with pytest.warns(DataWarning, match="longmemeval"):
        data = load_longmemeval(p)
    sessions, instances = data  # the (sessions, instances) pair
    rep = data.report

    ids = [s.session_id for s in sessions]
    assert ids == [
        "longmemeval:sharegpt_a_0",
        "longmemeval:answer_q001_1",
        "longmemeval:ultrachat_7",
        ids[3],
        "longmemeval:answer_x",
    ]
    assert re.fullmatch(r"longmemeval:sharegpt_a_0~[0-9a-f]{8}", ids[3])  # same id, other turns
    assert all(s.date is None and s.source == "longmemeval" for s in sessions)
    pool = data.pool()
    assert pool["longmemeval:answer_q001_1"].turns[0].content == "I just adopted a beagle named Pixel."
    conflict = pool[ids[3]]
    assert [(t.role, t.content) for t in conflict.turns] == [("user", "A different text under a reused id.")]

    assert [i.question_id for i in instances] == ["q_001", "q_002"]
    q1, q2 = instances
    assert q1.user_id == "longmemeval:q_001" and q1.question_type == "single-session-user"
    assert q1.question_date == "2023-05-30" and q1.question_date_raw == "2023/05/30 (Tue) 23:40"
    assert [(r.session_id, r.date) for r in q1.history] == [
        ("longmemeval:sharegpt_a_0", "2023-05-20"),
        ("longmemeval:answer_q001_1", "2023-05-21"),
        ("longmemeval:ultrachat_7", "2023-05-22"),
    ]
    assert q1.datetimes == ("2023-05-20T02:21", "2023-05-21T10:00", "2023-05-22T18:45")
    assert q1.answer_session_ids == ("longmemeval:answer_q001_1",)
    assert q1.evidence_turns == {"longmemeval:answer_q001_1": (0,)}
    assert q2.answer == "3"
    # one shared session, two instances, two dates: the dates live in each instance's history
    assert [(r.session_id, r.date) for r in q2.history] == [
        ("longmemeval:ultrachat_7", "2023-06-01"),
        (ids[3], "2023-06-10"),
        ("longmemeval:answer_x", "2023-06-20"),
    ]
    assert q2.answer_session_ids == ("longmemeval:answer_x",)
    u = q2.user_history()
    assert u.user_id == "longmemeval:q_002" and u.evidence_session_ids == ("longmemeval:answer_x",)
    assert [s.date for s in q2.sessions(pool)] == ["2023-06-01", "2023-06-10", "2023-06-20"]

    assert rep.records == 4 and rep.sessions == 5 and rep.extra["instances"] == 2
    assert rep.dropped == {"bad_date": 1, "length_mismatch": 1, "malformed": 1}
    assert rep.turns_dropped == {"empty": 1, "unknown_role": 1}
    assert rep.notes == {"id_conflict": 1, "answer_not_in_haystack": 1}
    with pytest.raises(ValueError, match=r"q_002\) session 1 \(sharegpt_a_0\) turn 2: unknown_role"):
        load_longmemeval(p, on_error="raise")


def test_longmemeval_oracle_gz_and_memory_store(tmp_path: Path) -> None:
    """The oracle file has the same format with only evidence sessions; gzip is accepted. Each
    instance's haystack becomes a user's memory with that instance's dates."""
    from shopping_companion.memory.embedder import Embedder
    from shopping_companion.memory.store import MemoryStore

    oracle = [
        dict(
            _lme_instances()[0],
            haystack_session_ids=["answer_q001_1"],
            haystack_dates=["2023/05/21 (Sun) 10:00"],
            haystack_sessions=[ANSWER_1],
        )
    ]
    p = tmp_path / "longmemeval_oracle.json.gz"
    p.write_bytes(gzip.compress(json.dumps(oracle).encode()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        sessions, instances = load_longmemeval(p)
    assert [s.session_id for s in sessions] == ["longmemeval:answer_q001_1"]
    assert instances[0].answer_session_ids == ("longmemeval:answer_q001_1",)

    full = tmp_path / "s.json"
    full.write_text(json.dumps(_lme_instances()[:2]))
    with pytest.warns(DataWarning):
        data = load_longmemeval(full)
    pool = data.pool()
    emb = Embedder(cache_path=tmp_path / "emb.sqlite")
    q1, q2 = data.instances
    st1 = MemoryStore.from_pool(pool, q1.history, emb)
    st2 = MemoryStore.from_pool(pool, q2.history, emb)
    hit = st1.search("what is the name of my dog", top_k=1)[0]
    assert hit["session_id"] == "longmemeval:answer_q001_1" and hit["date"] == "2023-05-21"
    assert hit["turn_index"] == 0
    rain1 = st1.search("rain in Lisbon", top_k=1)[0]
    rain2 = st2.search("rain in Lisbon", top_k=1)[0]
    assert rain1["session_id"] == rain2["session_id"] == "longmemeval:ultrachat_7"
    assert (rain1["date"], rain2["date"]) == ("2023-05-22", "2023-06-01")
    assert rain1["score"] == rain2["score"]
    emb.close()


def test_longmemeval_rejects_non_list(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"question_id": "q"}')
    with pytest.raises(ValueError, match="JSON list"):
        load_longmemeval(p)


# --------------------------------------------------------------------------- SGD skip mode, registry


def test_sgd_skip_mode_counts_and_real_file_is_clean(tmp_path: Path) -> None:
    p = tmp_path / "sgd.jsonl"
    lines = [
        json.dumps(
            {
                "dialogue_id": "1",
                "services": [],
                "turns": [
                    {"speaker": "USER", "utterance": "Find me a flight."},
                    {"speaker": "BOT", "utterance": "??"},
                    {"speaker": "SYSTEM", "utterance": "Where to?"},
                ],
            }
        ),
        "{broken",
        json.dumps({"dialogue_id": "2", "turns": "nope"}),
        json.dumps({"dialogue_id": "1", "turns": [{"speaker": "USER", "utterance": "again"}]}),
    ]
    p.write_text("\n".join(lines) + "\n")
    rep = LoadReport(source="sgd", path="")
    with pytest.warns(DataWarning, match="sgd"):
        sessions = load_sgd(p, on_error="skip", report=rep)
    assert [(s.session_id, len(s.turns)) for s in sessions] == [("sgd:1", 2)]
    assert rep.records == 4 and rep.sessions == 1
    assert rep.dropped == {"malformed": 2, "duplicate_id": 1}
    assert rep.turns_dropped == {"unknown_speaker": 1}
    assert any(e.startswith(f"{p}:2: malformed") for e in rep.examples)

    real = LoadReport(source="sgd", path="")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        assert len(load_sgd(on_error="skip", report=real)) == 3069
    assert real.n_problems == 0 and real.records == 3069


def test_load_sessions_registry() -> None:
    s, rep = load_sessions("topicalchat")
    assert len(s) == 539 and rep.source == "topicalchat"
    s, rep = load_sessions("locomo")
    assert len(s) == 272 and rep.extra["users"] == 10
    s, rep = load_sessions("sgd")
    assert len(s) == 3069 and rep.records == 3069
    s, rep = load_sessions("sharegpt", limit=5)
    assert len(s) == 5
    with pytest.raises(ValueError, match="unknown source"):
        load_sessions("reddit")
    with pytest.raises(ValueError, match="path"):
        load_sessions("longmemeval")
    # all of them fit in one pool: ids never collide across sources
    pool = SessionPool(load_sessions("topicalchat")[0] + load_sessions("locomo")[0])
    assert pool.source_counts() == {"topicalchat": 539, "locomo": 272}
