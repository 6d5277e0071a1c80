"""The LLM-attribution cache of a run (``taxonomy_llm.jsonl``): a rerun reuses the attributions of
the same model and passes over lines it cannot use (never fatal)."""

from __future__ import annotations

import json
from pathlib import Path

from shopping_companion.benchmark.run import _attribution_cache


def _line(task_id: str, model: str = "attribution:m", category: str = "other") -> str:
    return json.dumps({"task_id": task_id, "trial": 0, "strategy": "oracle", "model": model, "category": category})


def test_cache_keeps_this_models_attributions_and_passes_over_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "taxonomy_llm.jsonl"
    lines = [_line("t1"), "{broken", "", _line("t2", model="attribution:other"), _line("t3", category=""), "[1]"]
    path.write_text("\n".join([*lines, _line("t4")]) + "\n" + _line("t5")[:-3], encoding="utf-8")
    cached = _attribution_cache(path, "m")
    assert sorted(cached) == [("t1", 0, "oracle"), ("t4", 0, "oracle")]
    assert cached[("t1", 0, "oracle")]["category"] == "other"


def test_no_cache_file_is_an_empty_cache(tmp_path: Path) -> None:
    assert _attribution_cache(tmp_path / "taxonomy_llm.jsonl", "m") == {}
