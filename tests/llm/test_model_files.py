"""llm.model_files.model_config: a model's config.json from a local directory or the local
Hugging Face cache, never downloaded; every miss is (None, why), never an exception."""

import json

from shopping_companion.llm.model_files import looks_like_path, model_config


def test_a_local_directory_config_is_read_and_each_bad_one_says_why(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    assert model_config(str(d)) == (None, f"{d} has no config.json")
    (d / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    assert model_config(str(d)) == ({"max_position_embeddings": 4096}, str(d / "config.json"))
    (d / "config.json").write_text("{not json")
    data, why = model_config(str(d))
    assert data is None and why.startswith(f"{d / 'config.json'} is not readable JSON (")
    (d / "config.json").write_text("[1, 2]")
    assert model_config(str(d)) == (None, f"{d / 'config.json'} is not a JSON object")
    assert model_config(str(tmp_path / "gone")) == (None, f"{tmp_path / 'gone'} does not exist here")


def test_a_hub_id_is_read_from_the_local_cache_only(tmp_path, monkeypatch):
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    data, why = model_config("Org/absent")
    assert data is None and why == (
        "Org/absent is not a local directory and its config.json is not in the Hugging Face cache here"
    )
    repo = tmp_path / "hub" / "models--Org--cached"  # the layout huggingface_hub writes
    (repo / "snapshots" / "abc").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc")
    (repo / "snapshots" / "abc" / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    assert model_config("Org/cached") == (
        {"tie_word_embeddings": True},
        str(repo / "snapshots" / "abc" / "config.json"),
    )


def test_a_name_is_a_path_when_it_is_written_as_one_or_exists(tmp_path, monkeypatch):
    for name in ("/abs/model", "./rel", "../up", "~/m", "a/b/c"):
        assert looks_like_path(name), name
    for name in ("Qwen/Qwen3-4B", "gpt2"):
        assert not looks_like_path(name), name
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt2").write_text("x")  # a file of that name here: meant as a path
    assert looks_like_path("gpt2")
    assert model_config("gpt2") == (None, "gpt2 is a file, not a model directory")
