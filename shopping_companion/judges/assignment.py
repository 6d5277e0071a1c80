"""Which answer preference stands for which gold preference: a maximum bipartite matching.

The rule judge (:mod:`shopping_companion.judges.rule`) pairs each gold preference with at most one
answer preference that states it and each answer with at most one gold (the m1/m2 counts of
docs/judge.md are read from the pairs and the answers left over). Imports nothing.
"""

from __future__ import annotations

__all__ = ["max_matching"]


def max_matching(adj: list[list[int]]) -> dict[int, int]:
    """A maximum bipartite matching (augmenting paths): ``adj[i]`` lists the answers gold ``i`` may
    match, in order of preference; returns ``{answer: gold}``."""
    owner: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in adj[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in range(len(adj)):
        augment(i, set())
    return owner
