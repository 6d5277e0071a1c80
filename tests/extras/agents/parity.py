"""What "the same episode" means in the parity tests: per stage, the same chat (every tool
observation, reminder and opening message, in order), termination, final answer, verdict and
reward breakdown (total, components, per-call rewards) to the float; and the same Acc and Succ.
Wall times, latencies and token counts are the only fields left out."""

from __future__ import annotations

from shopping_companion.types import EpisodeResult, StageResult


def stage_view(st: StageResult) -> dict:
    t = st.trajectory
    return {
        "stage": t.stage,
        "mode": t.mode,
        "messages": [m.model_dump(exclude={"reasoning_content"}) for m in t.messages],
        "termination": t.termination,
        "final_answer": t.final_answer,
        "identified_preferences": t.identified_preferences,
        "recommended_ids": t.recommended_ids,
        "verdict": st.verdict.model_dump(),
        "reward": st.reward.model_dump(),
    }


def assert_same_episode(got: EpisodeResult, want: EpisodeResult) -> None:
    """``got`` (through an adapter) plays and scores exactly as ``want`` (``shopcomp eval``)."""
    assert got.error == want.error
    assert [stage_view(s) for s in got.stages] == [stage_view(s) for s in want.stages]
    assert (got.acc, got.succ) == (want.acc, want.succ)
