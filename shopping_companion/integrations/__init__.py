"""Adapters that run the Shopping Companion benchmark inside other people's tools: Inspect AI
(:mod:`shopping_companion.integrations.inspect`), PrimeIntellect's verifiers
(:mod:`~shopping_companion.integrations.verifiers`) and skyrl-gym
(:mod:`~shopping_companion.integrations.skyrl`). Each is built on the same environment, eval
builders, judge and rubric as ``shopcomp eval``, needs its optional extra
(``pip install -e ".[inspect]"``, ``".[verifiers]"``, ``".[skyrl]"``) and is described in
docs/integrations.md. Nothing is imported here, so importing one adapter never needs another's
stack.
"""
