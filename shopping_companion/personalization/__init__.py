"""Second benchmark: multi-agent personalised RAG over Amazon Reviews 2023.

Implements "Personalization Matters: Long-Horizon Conversation Agent with User-Centric Information in
Online Shopping Interactions" (Gao et al., 2026):

- :mod:`.data` — review / metadata / user-history loaders, item records, downloads (§4, App. A.1)
- :mod:`.selection` — target users and items, leakage control (§3.3)
- :mod:`.profiles` — structured profiles: rule-based (offline default) and LLM (§3.3, Fig. 3)
- :mod:`.queries` — 5-8 question trajectories: templates (offline default) and LLM (§3.3, Fig. 4)
- :mod:`.retrieval` — embeddings and R_d, R_p (Eq. 7), R_r (§3.5-3.6)
- :mod:`.vision` — image descriptions from a vision-language endpoint (e^d)
- :mod:`.agents` — Dialogue / Recommend / Reason / Reply agents, the five variants (Table 2), memory ablation
- :mod:`.judge` — trajectory judge GPC / CIS / IT / TC (§5.2, Table 13)
- :mod:`.metrics` — retrieval accuracy, SR@all, Wilcoxon + Holm + rank-biserial, Spearman (Tables 4, 8-10)
- :mod:`.build`, :mod:`.runner`, :mod:`.report`, :mod:`.cli` — `shopcomp personalize build|run|eval`
"""
