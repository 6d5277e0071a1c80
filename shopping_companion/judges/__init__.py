"""Judges (docs/architecture.md, judges): the deterministic rule judge, the LLM judge over any OpenAI-compatible
endpoint, selective verdicts (confident / uncertain items, :mod:`~shopping_companion.judges.selective`)
and the cascade of the two (:mod:`~shopping_companion.judges.cascade`), judge agreement (per-field
agreement, Cohen's κ, Pearson/Spearman, the paper's OPC) and the per-episode metrics Acc / Succ (:mod:`~shopping_companion.judges.base`, with the
``Judge`` protocol). Modules import lazily: ``from shopping_companion.judges.rule
import RuleJudge``; judge classes are also in :data:`shopping_companion.registry.JUDGES`
(``rule``, ``llm``)."""
