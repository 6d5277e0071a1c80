"""``shopcomp sft export`` on a model with tied embeddings (``tie_word_embeddings: true``, as the
tiny test model and Qwen3's small models have): a training config that trains the embeddings or
the output head gets a warning naming the keys and what LLaMA-Factory does with them, recorded in
export.json; never an error. What LLaMA-Factory really does is checked in
``tests/extras/sft/test_tied_embeddings.py``."""

from __future__ import annotations

import json

import pytest

from shopping_companion.sft.export import tied_embeddings_report
from tests.tiny_model import build_tiny_model
from tests.sft.test_sft_export_lengths import _examples, _export


@pytest.fixture(scope="module")
def tied_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tied"), vocab_size=600)


def _untied(root, tied_dir):
    cfg = json.loads((tied_dir / "config.json").read_text())
    cfg["tie_word_embeddings"] = False
    d = root / "untied"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_lora_additional_target_on_a_tied_model_warns_and_is_recorded(tied_dir, tmp_path):
    assert json.loads((tied_dir / "config.json").read_text())["tie_word_embeddings"] is True
    examples = _examples("R", 0, [1])
    s = _export(
        examples,
        tmp_path / "e",
        base_model=str(tied_dir),
        overrides={"additional_target": "embed_tokens,lm_head", "cutoff_len": "100000"},
    )
    assert len(s.warnings) == 1
    w = s.warnings[0]
    for needle in (
        "finetuning_type: lora, additional_target: embed_tokens,lm_head",
        f"tie_word_embeddings: true in {tied_dir / 'config.json'}",
        "modules_to_save",
        "two different matrices",
        "ties were broken",
        "tie_word_embeddings: false",
    ):
        assert needle in w, (needle, w)
    manifest = json.loads((tmp_path / "e" / "export.json").read_text())
    assert manifest["warnings"] == s.warnings
    tied = manifest["tied_embeddings"]
    assert tied["tie_word_embeddings"] is True and tied["config"] == str(tied_dir / "config.json")
    assert tied["findings"][0]["keys"] == {"finetuning_type": "lora", "additional_target": "embed_tokens,lm_head"}
    assert tied["findings"][0]["severity"] == "warning" and tied["findings"][0]["modules"] == [
        "embed_tokens",
        "lm_head",
    ]
    # the paper's config (LoRA on q/k/v/o only) says nothing
    plain = _export(examples, tmp_path / "p", base_model=str(tied_dir), overrides={"cutoff_len": "100000"})
    assert plain.warnings == [] and plain.tied_embeddings["findings"] == []
    assert plain.tied_embeddings["tie_word_embeddings"] is True
    # the same keys on a model that does not tie its embeddings: nothing to warn about
    untied = _export(
        examples,
        tmp_path / "u",
        base_model=str(_untied(tmp_path, tied_dir)),
        tokenizer=str(tied_dir),
        overrides={"additional_target": "embed_tokens,lm_head", "cutoff_len": "100000"},
    )
    assert untied.warnings == [] and untied.tied_embeddings["tie_word_embeddings"] is False


def test_each_way_of_training_the_tied_matrix_is_named(tied_dir, tmp_path):
    base = {"model_name_or_path": str(tied_dir)}

    def report(**keys):
        return tied_embeddings_report({**base, **keys})

    # resize_vocab without additional_target: LLaMA-Factory adds both modules itself
    r = report(resize_vocab=True)
    assert len(r["warnings"]) == 1 and "resize_vocab: True" in r["warnings"][0]
    assert "adds the embedding and output modules to additional_target itself" in r["warnings"][0]
    # one module of the pair, as a list; OFT goes the same way
    r = report(finetuning_type="oft", additional_target=["lm_head"])
    assert len(r["warnings"]) == 1 and "trains lm_head" in r["warnings"][0]
    # LoRA on the head: the merge writes its delta into the shared matrix
    r = report(lora_target="q_proj,v_proj,lm_head")
    assert len(r["warnings"]) == 1 and "lora_target: q_proj,v_proj,lm_head" in r["warnings"][0]
    assert "not base + adapter" in r["warnings"][0]
    assert report(lora_target="all")["warnings"] == []  # LLaMA-Factory's "all" leaves lm_head and embeddings out
    # freeze: lm_head is refused by LLaMA-Factory, embed_tokens trains both roles (a note)
    r = report(finetuning_type="freeze", freeze_extra_modules="lm_head")
    assert (
        len(r["warnings"]) == 1 and "refuses to start" in r["warnings"][0] and "Name embed_tokens" in r["warnings"][0]
    )
    r = report(finetuning_type="freeze", freeze_extra_modules="embed_tokens,norm")
    assert r["warnings"] == [] and len(r["notes"]) == 1 and "the tie is kept" in r["notes"][0]
    # full fine-tuning trains the shared matrix as one: a note, no warning
    r = report(finetuning_type="full")
    assert r["warnings"] == [] and "finetuning_type: full" in r["notes"][0] and "tie is kept" in r["notes"][0]
    assert report(finetuning_type="freeze")["notes"] == []  # hidden layers only


def test_a_model_whose_config_is_not_here_gets_a_note_not_a_warning(tmp_path, monkeypatch):
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    r = tied_embeddings_report({"model_name_or_path": "Org/not-here", "additional_target": "embed_tokens"})
    assert r["warnings"] == [] and r["tie_word_embeddings"] is None and r["config"] is None
    assert len(r["notes"]) == 1 and "could not be checked" in r["notes"][0] and "Org/not-here" in r["notes"][0]
    assert tied_embeddings_report({"model_name_or_path": "Org/not-here", "finetuning_type": "full"})["notes"] == []
    # a hub id whose config.json is in the local Hugging Face cache is read from there
    repo = tmp_path / "hub" / "models--Org--tied"
    (repo / "snapshots" / "abc").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc")
    (repo / "snapshots" / "abc" / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    r = tied_embeddings_report({"model_name_or_path": "Org/tied", "additional_target": "embed_tokens"})
    assert r["tie_word_embeddings"] is True and len(r["warnings"]) == 1
