"""The one check of an optional scoring deadline (llm/breaker.deadline_or_none), as the reward
spec, the TRL config and the GRPO resources use it."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from shopping_companion.llm.breaker import deadline_or_none
from shopping_companion.rewards.spec import RewardSpec
from shopping_companion.trainers.resources import check_scoring_deadline


@pytest.mark.parametrize("value, expected", [(None, None), (30, 30.0), (0.5, 0.5), (1e9, 1e9)])
def test_good_deadlines(value, expected):
    got = deadline_or_none(value, "scoring_deadline_s")
    assert got == expected and (got is None or isinstance(got, float))


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, -math.inf, True, False, "30", [30]])
def test_bad_deadlines_name_the_field(value):
    with pytest.raises(ValueError, match=r"^scoring_deadline_s: must be a finite number of seconds > 0, or null"):
        deadline_or_none(value, "scoring_deadline_s")
    with pytest.raises(ValueError, match=r"^seconds: must be"):
        check_scoring_deadline(value, "seconds")


def test_without_a_field_and_with_other_accepted_values():
    with pytest.raises(ValueError, match=r"^must be a finite number of seconds > 0, or null for no deadline; got -1$"):
        deadline_or_none(-1)
    with pytest.raises(ValueError, match=r"^must be 'spec', a finite number of seconds > 0, or null"):
        deadline_or_none(0, also="'spec', ")


def test_the_reward_spec_uses_it():
    assert RewardSpec(scoring_deadline_s=None).scoring_deadline_s is None
    assert RewardSpec(scoring_deadline_s=12).scoring_deadline_s == 12.0
    for bad in (0, -3):
        with pytest.raises(ValidationError, match="must be a finite number of seconds > 0, or null for no deadline"):
            RewardSpec(scoring_deadline_s=bad)
    for bad in (math.nan, math.inf):  # refused by the model's allow_inf_nan=False before the check
        with pytest.raises(ValidationError, match="scoring_deadline_s"):
            RewardSpec(scoring_deadline_s=bad)
