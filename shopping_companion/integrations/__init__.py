"""Adapters that run the Shopping Companion benchmark and environment inside other tools: Inspect AI
(:mod:`shopping_companion.integrations.inspect`), verifiers and skyrl-gym. Each is built on the same
environment, tools, judge and reward spec as ``shopcomp eval``, and each needs its optional extra
(docs/integrations.md); nothing here is imported by the rest of the package.
"""
