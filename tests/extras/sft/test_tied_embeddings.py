"""What LLaMA-Factory 0.9.5 really does with the embeddings of a model that ties them (run in
.venv-sft: `.venv-sft/bin/python -m pytest -q tests/extras/sft/test_tied_embeddings.py`), so the
warnings of `shopcomp sft export` (``tied_embeddings_report``) are true: `llamafactory-cli train`
and `llamafactory-cli export` on CPU with the tiny tied Qwen3 model (``tie_word_embeddings: true``)
and a few step-level examples written by our export.

- LoRA with ``additional_target: embed_tokens,lm_head``: the merged model holds two different
  matrices while its config says they are tied; transformers loads them untied and warns.
- LoRA with ``lora_target`` naming ``lm_head``: the merged model is not base + adapter.
- ``finetuning_type: full``: the shared matrix is trained as one and stays tied.

Without LLaMA-Factory these tests skip, unless SHOPCOMP_REQUIRE_EXTRAS=1 (CI), where they fail.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

try:
    import llamafactory  # noqa: F401

    _LF_ERROR = None
except Exception as e:  # ImportError, or a broken torchvision/torchaudio (docs/sft.md)
    _LF_ERROR = f"{type(e).__name__}: {e}"

if _LF_ERROR is not None:
    if os.environ.get("SHOPCOMP_REQUIRE_EXTRAS") == "1":
        raise RuntimeError(
            f"LLaMA-Factory is required (SHOPCOMP_REQUIRE_EXTRAS=1) but not importable: {_LF_ERROR}; "
            "install it with scripts/install_sft.sh"
        )
    pytest.skip(f"LLaMA-Factory not importable ({_LF_ERROR}); scripts/install_sft.sh", allow_module_level=True)

from tests.extras.sft.lf_support import llamafactory_cli  # noqa: E402
from tests.tiny_model import build_tiny_model  # noqa: E402
from tests.sft.test_sft_export_lengths import _examples, _export  # noqa: E402

CPU = {
    "use_cpu": True,
    "bf16": False,
    "max_steps": 2,
    "per_device_train_batch_size": 2,
    "learning_rate": 1e-2,
    "cutoff_len": 4096,
    "lora_rank": 4,
    "lora_alpha": 8,
    "logging_steps": 1,
    "save_steps": 1000,
    "plot_loss": False,
    "preprocessing_num_workers": 1,
    "dataloader_num_workers": 0,
    "warmup_ratio": 0.0,
}


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    d = build_tiny_model(tmp_path_factory.mktemp("tied"), vocab_size=600)
    assert json.loads((d / "config.json").read_text())["tie_word_embeddings"] is True
    return d


def _export_and_train(tied: Path, out: Path, merge: bool = False, **keys):
    """Export a few examples with ``keys`` over the CPU settings, ``llamafactory-cli train`` them
    (then ``llamafactory-cli export``, the merge, when ``merge``); the summary and the train log."""
    s = _export(_examples("R", 0, [1, 2]), out, base_model=str(tied), template="qwen", overrides={**CPU, **keys})
    commands = [["train", str(s.train_yaml)]] + ([["export", str(s.merge_yaml)]] if merge else [])
    _wall, logs = llamafactory_cli(*commands, cwd=out)
    return s, logs[0]


def _load(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).eval()


def _logits(model, ids):
    import torch

    with torch.inference_mode():
        return model(input_ids=ids).logits


def test_additional_target_unties_the_merged_model_as_the_export_warns(tied, tmp_path, caplog):
    import logging

    import torch

    s, log = _export_and_train(tied, tmp_path / "e", merge=True, additional_target="embed_tokens,lm_head")
    assert len(s.warnings) == 1 and "two different matrices" in s.warnings[0]
    assert "ensure_weight_tying" in log  # PEFT says so while LLaMA-Factory trains
    merged_dir = s.out_dir / "merged"
    assert (
        json.loads((merged_dir / "config.json").read_text())["tie_word_embeddings"] is True
    )  # the config still says tied
    with caplog.at_level(logging.WARNING, logger="transformers"):
        merged, base = _load(merged_dir), _load(tied)
    err = caplog.text
    assert "NOT tie them" in err and "tie_word_embeddings=False" in err  # transformers: the ties were broken
    emb, head = merged.model.embed_tokens.weight, merged.lm_head.weight
    assert emb is not head and not torch.equal(emb, head)  # two matrices, as the warning says
    assert not torch.equal(emb, base.model.embed_tokens.weight) and not torch.equal(head, base.lm_head.weight)
    # what a runtime that follows the config does (one matrix for both roles) is another model
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    retied = _load(merged_dir)
    retied.lm_head.weight = retied.model.embed_tokens.weight
    assert not torch.allclose(_logits(merged, ids), _logits(retied, ids), atol=1e-4)


def test_lora_on_the_tied_head_makes_the_merge_differ_from_base_plus_adapter(tied, tmp_path):
    import torch
    from peft import PeftModel

    s, _ = _export_and_train(tied, tmp_path / "e", merge=True, lora_target="q_proj,v_proj,lm_head")
    assert len(s.warnings) == 1 and "not base + adapter" in s.warnings[0]
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    adapter = PeftModel.from_pretrained(_load(tied), str(s.out_dir / "lora")).eval()
    merged = _load(s.out_dir / "merged")
    assert merged.lm_head.weight is merged.model.embed_tokens.weight  # still one matrix ...
    assert not torch.equal(merged.model.embed_tokens.weight, _load(tied).model.embed_tokens.weight)  # ... changed
    assert not torch.allclose(_logits(adapter, ids), _logits(merged, ids), atol=1e-4)


def test_full_fine_tuning_keeps_the_tie_as_the_export_notes(tied, tmp_path):
    import torch

    s, _ = _export_and_train(tied, tmp_path / "e", finetuning_type="full")
    assert s.warnings == [] and "the tie is kept" in s.tied_embeddings["notes"][0]
    trained = _load(s.out_dir / "lora")  # output_dir: the full model
    assert trained.lm_head.weight is trained.model.embed_tokens.weight
    assert not torch.equal(trained.model.embed_tokens.weight, _load(tied).model.embed_tokens.weight)
