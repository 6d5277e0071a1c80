"""Trajectory-level LLM judge: GPC, CIS, IT, TC on 1-5 (paper §5.2, App. Table 13).

The judge reads the user profile and the visible transcript (q_t, y_t for all turns) and returns one
JSON object ``{"gpc", "cis", "it", "tc": integers 1-5, "reasons": short text}`` — strict schema,
re-asked with the validation error when broken, cached (:class:`.llmjson.JSONAsker`). The rubric
below is our wording of Table 13's anchors. Overall = mean of the four scores (Table 8 note).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.personalization.llmjson import JSONAsker
from shopping_companion.personalization.profiles import UserProfile

__all__ = ["JUDGE_METRICS", "TrajectoryJudge", "TrajectoryScores", "judge_messages"]

JUDGE_METRICS = ("gpc", "cis", "it", "tc")
Score = Annotated[int, Field(ge=1, le=5)]


class TrajectoryScores(BaseModel):
    """The judge's reply: four integer scores in 1..5 and reasons."""

    model_config = ConfigDict(extra="forbid", strict=True)
    gpc: Score
    cis: Score
    it: Score
    tc: Score
    reasons: str

    @property
    def overall(self) -> float:
        """Mean of the four scores."""
        return (self.gpc + self.cis + self.it + self.tc) / 4


_RUBRIC = """Score each dimension from 1 to 5 (integers; 2 and 4 lie between the anchors).
GPC - global personalization consistency: does every reply stay in line with the shopper profile and with what the
  shopper said earlier? 1 = later replies drop or contradict known constraints, or invent facts about the shopper;
  3 = explicit constraints are kept but softer ones (style, taste) fade; 5 = every reply, first to last, fits the profile
  and nothing is forgotten.
CIS - cumulative information synthesis: taken together, do the replies build one coherent, factual picture?
  1 = the same facts repeated or facts that contradict each other across turns; 3 = correct answers to each question
  that are not linked; 5 = later replies build on earlier ones and refer back to them.
IT - interaction trajectory: do the replies move the conversation forward to a decision? 1 = going in circles,
  repeating suggestions or the same clarifying questions; 3 = accurate but passive, waiting for the shopper to lead;
  5 = a clear arc from clarifying to recommending, refining and closing.
TC - tone consistency: is the assistant's voice stable? 1 = jumps between stiff and casual registers at random;
  5 = one consistent, professional and warm shopping voice from start to end."""

_SYSTEM = (
    "You evaluate whole conversations between a shopper and an AI shopping assistant. You judge the assistant "
    "only, using the shopper profile (which the assistant never saw directly) and the full transcript. Reply with "
    "one JSON object and nothing else."
)


def judge_messages(
    profile: UserProfile, turns: list[tuple[str, str]], max_reply_chars: int = 2500
) -> list[dict[str, str]]:
    """The judge's messages for a profile and ``[(query, reply), ...]`` transcript."""
    convo = "\n".join(
        f"[Turn {i}] Shopper: {q}\n[Turn {i}] Assistant: {r[:max_reply_chars]}" for i, (q, r) in enumerate(turns, 1)
    )
    user = (
        f"Shopper profile:\n{profile.as_text()}\n\nTranscript:\n{convo}\n\n{_RUBRIC}\n\n"
        'Return {"gpc": <1-5>, "cis": <1-5>, "it": <1-5>, "tc": <1-5>, "reasons": "<two or three sentences>"}.'
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


class TrajectoryJudge:
    """``judge(profile, turns) -> TrajectoryScores`` through an OpenAI-compatible endpoint.

    Raises :class:`shopping_companion.personalization.llmjson.JSONAskError` when no valid reply
    comes back within the retries (the caller records the failure; it is never scored).
    """

    def __init__(self, asker: JSONAsker, name: str | None = None) -> None:
        self.asker = asker
        self.name = name or f"llm:{asker.model_id}"

    def judge(self, profile: UserProfile, turns: list[tuple[str, str]]) -> TrajectoryScores:
        return self.asker.ask(judge_messages(profile, turns), TrajectoryScores)
