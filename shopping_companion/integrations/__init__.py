"""Adapters that run the Shopping Companion benchmark inside other people's tools: PrimeIntellect's
verifiers (:mod:`~shopping_companion.integrations.verifiers`), skyrl-gym
(:mod:`~shopping_companion.integrations.skyrl`) and Inspect AI (``integrations.inspect``). Each is
built on the same environment, eval builders, judge and rubric as ``shopcomp eval``, needs its
optional extra (``pip install -e ".[verifiers]"`` and so on) and is described in
docs/integrations.md. Nothing is imported here, so importing one adapter never needs another's
stack.
"""
