"""The training pipeline: benchmark → SFT collection → LoRA/full SFT → GRPO arms → evaluation →
report, as one resumable command (``shopcomp pipeline``; docs/pipeline.md)."""
