"""The one JSON-object-from-a-reply extractor (llm/replies.extract_json) that the LLM judge
(which="last"), the LLM task generator and the LLM attribute extractor (which="first") share."""

from __future__ import annotations

import pytest

from shopping_companion.llm.replies import extract_json


@pytest.mark.parametrize("which", ["first", "last"])
def test_one_object_alone_in_a_fence_or_in_prose(which):
    assert extract_json('{"a": 1}', which=which) == {"a": 1}
    assert extract_json('```json\n{"a": 1}\n```', which=which) == {"a": 1}
    assert extract_json('Sure! Here it is:\n{"a": {"b": [1, 2]}}\nHope this helps.', which=which) == {
        "a": {"b": [1, 2]}
    }
    assert extract_json('{"note": "braces {in} a string"} done', which=which) == {"note": "braces {in} a string"}


def test_several_bare_objects_first_or_last():
    text = 'Draft: {"a": {"b": 1}} Final: {"a": {"b": 2}}'
    assert extract_json(text, which="first") == {"a": {"b": 1}}
    assert extract_json(text, which="last") == {"a": {"b": 2}}
    # a nested object is never a candidate of its own, whichever end is taken
    assert extract_json('x {"a": {"b": 1}} y', which="last") == {"a": {"b": 1}}


def test_several_fenced_objects_first_or_last_and_fences_beat_bare_objects():
    text = 'The user said {"colour": "navy"}.\n```json\n{"m": 1}\n```\nor\n```\n{"m": 2}\n```\nthen {"z": 0}'
    assert extract_json(text, which="first") == {"m": 1}
    assert extract_json(text, which="last") == {"m": 2}
    # a fence that does not hold one object is passed over
    assert extract_json('```\n[1, 2]\n``` and ```json\n{"ok": true}\n```', which="first") == {"ok": True}


@pytest.mark.parametrize("which", ["first", "last"])
def test_reasoning_is_removed(which):
    assert extract_json('<think>maybe {"x": 0}</think>Sure! {"a": 1}', which=which) == {"a": 1}
    assert extract_json('<THINK>{"x": 0}</THINK>{"a": 1}', which=which) == {"a": 1}
    assert extract_json('reasoning {"x": 0} here</think>{"a": 2}', which=which) == {"a": 2}  # a lone </think>


@pytest.mark.parametrize("which", ["first", "last"])
def test_malformed_json_is_skipped_when_an_object_follows(which):
    assert extract_json('{broken, "a": } then {"ok": 1}', which=which) == {"ok": 1}
    assert extract_json("```json\n{'single': 1}\n```\n{\"ok\": 2}", which=which) == {"ok": 2}


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize(
    "bad, says",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("<think>{}</think>", "empty"),
        ("no json here", "no JSON object"),
        ("{broken", "no JSON object"),
        ("{'single': 'quotes'}", "no JSON object"),
        ("Sure: [1, 2]", "no JSON object"),
        ("[1, 2]", "JSON list"),
        ('[{"a": 1}]', "JSON list"),  # one JSON value that is not an object: refused, not searched
        ("```json\n[1]\n```", "JSON list"),
        ('"text"', "JSON str"),
    ],
)
def test_replies_without_an_object_are_refused(bad, says, which):
    with pytest.raises(ValueError, match=says):
        extract_json(bad, which=which)


def test_which_must_be_first_or_last():
    with pytest.raises(ValueError, match="which"):
        extract_json('{"a": 1}', which="middle")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the one reply cache


def test_reply_cache_is_bounded_in_memory_and_complete_on_disk(tmp_path):
    from shopping_companion.llm.replies import ReplyCache

    mem = ReplyCache(None, max_entries=2)
    for k in "abc":
        mem.put(k, k.upper())
    assert mem.get("a") is None and mem.get("b") == "B" and mem.get("c") == "C" and len(mem) == 2
    disk = ReplyCache(tmp_path / "c.sqlite", max_entries=1)
    for k in "abc":
        disk.put(k, k.upper(), model="m")
    assert [disk.get(k) for k in "abc"] == ["A", "B", "C"]  # evicted from memory, read back from SQLite
    disk.put("a", "A2")  # the same key replaces its reply
    assert disk.get("a") == "A2" and len(disk) == 3
    disk.close()
    again = ReplyCache(tmp_path / "c.sqlite")  # another process sees the same file
    assert again.get("b") == "B" and again.get("a") == "A2" and again.get("d") is None
    again.close()


def test_reply_cache_key_is_the_sha256_of_the_sorted_json_payload():
    import hashlib
    import json

    from shopping_companion.llm.replies import ReplyCache

    payload = {"model": "m", "messages": [{"role": "user", "content": "héllo"}], "sampling": {"t": 0}}
    want = hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
    assert ReplyCache.key(payload) == want == ReplyCache.key(dict(reversed(payload.items())))
    assert ReplyCache.key({**payload, "sampling": {"t": 1}}) != want


def _old_file(path, create: str, rows: list[tuple]) -> None:
    import sqlite3

    db = sqlite3.connect(path)
    db.execute(create)
    db.executemany(f"INSERT INTO {create.split()[2]} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    db.commit()
    db.close()


@pytest.mark.parametrize(
    "create, rows",
    [
        # the LLM judge's and the personalization roles' file before the one cache
        ("CREATE TABLE replies (key TEXT PRIMARY KEY, reply TEXT NOT NULL, created REAL)", [("k1", "R1", 1.0)]),
        # the LLM task generator's and the attribute extractor's file before the one cache
        (
            "CREATE TABLE calls (key TEXT PRIMARY KEY, model TEXT, response TEXT, created REAL)",
            [("k1", "m", "R1", 1.0), ("k2", "m", None, 1.0)],
        ),
    ],
)
def test_a_cache_file_of_the_old_format_is_migrated_with_its_keys(tmp_path, create, rows):
    """The keys did not change, so an old file's replies are the same hits; a row without a reply
    is dropped, the old table is left for older code, and the migration runs once."""
    import sqlite3

    from shopping_companion.llm.replies import ReplyCache

    path = tmp_path / "old.sqlite"
    _old_file(path, create, rows)
    cache = ReplyCache(path)
    assert cache.get("k1") == "R1" and cache.get("k2") is None and len(cache) == 1
    cache.put("k3", "R3")
    cache.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    assert db.execute(f"SELECT COUNT(*) FROM {create.split()[2]}").fetchone()[0] == len(rows)  # left as it was
    db.execute(f"DELETE FROM {ReplyCache.TABLE} WHERE key = 'k1'")
    db.commit()
    db.close()
    again = ReplyCache(path)  # not migrated a second time
    assert again.get("k1") is None and again.get("k3") == "R3"
    again.close()


def test_an_old_table_of_another_shape_is_ignored_not_a_crash(tmp_path):
    from shopping_companion.llm.replies import ReplyCache

    path = tmp_path / "other.sqlite"
    _old_file(path, "CREATE TABLE replies (k TEXT, v BLOB)", [("k1", b"R1")])
    cache = ReplyCache(path)
    assert cache.get("k1") is None and len(cache) == 0
    cache.put("k1", "R1")
    assert cache.get("k1") == "R1"
    cache.close()
