"""The ``grpo_judged`` advantage estimator: registered in verl by our ``verl.plugins`` entry point at
``import verl``, reached through verl's own ``compute_advantage``, equal to verl's GRPO without judge
failures, and leaving judge-failed trajectories (``response_mask`` all 0) out of their group's
statistics — plain GRPO lets their placeholder score shift the other rollouts' advantages."""

from __future__ import annotations

import numpy as np
import pytest

from tests.extras.rl.conftest import require

require("verl", "torch")


def _batch(scores, masks, uids, length=4):
    import torch
    from verl import DataProto

    n = len(scores)
    rewards = torch.zeros(n, length)
    rewards[:, -1] = torch.tensor(scores, dtype=torch.float32)
    mask = torch.tensor([[m] * length for m in masks], dtype=torch.float32)
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


def _advantages(adv_estimator, data):
    from verl.trainer.ppo.ray_trainer import compute_advantage

    out = compute_advantage(data, adv_estimator=adv_estimator, num_repeat=1, norm_adv_by_std_in_grpo=True)
    return out.batch["advantages"][:, -1].numpy()


def test_the_entry_point_registers_the_estimator_at_import_verl():
    from importlib.metadata import entry_points

    import verl  # noqa: F401 - loads the verl.plugins entry points
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    eps = {e.name: e.value for e in entry_points(group="verl.plugins")}
    assert eps.get("shopping_companion") == "shopping_companion.trainers.verl_plugin"
    assert "grpo_judged" in ADV_ESTIMATOR_REGISTRY


def test_judge_failures_leave_the_group_statistics():
    # group a: three valid rollouts scoring 2.0 and one judge failure (placeholder score 0, mask 0);
    # group b: valid [1, 0, 1] and one judge failure
    scores = [2.0, 2.0, 2.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    masks = [1, 1, 1, 0, 1, 1, 1, 0]
    uids = ["a"] * 4 + ["b"] * 4
    plain = _advantages("grpo", _batch(scores, masks, uids))
    judged = _advantages("grpo_judged", _batch(scores, masks, uids))
    # plain GRPO: the placeholder drags group a's mean to 1.5, so equal valid rollouts get +0.5
    assert plain[:3] == pytest.approx([0.5, 0.5, 0.5], abs=1e-4)
    # grpo_judged: equal valid rollouts get 0; failures get 0; group b equals GRPO over [1, 0, 1]
    assert judged[:4] == pytest.approx([0.0, 0.0, 0.0, 0.0], abs=1e-6)
    b = _advantages("grpo", _batch([1.0, 0.0, 1.0], [1, 1, 1], ["b"] * 3))
    assert judged[4:7] == pytest.approx(b, abs=1e-6) and judged[7] == 0.0
    assert b == pytest.approx([0.57735, -1.1547, 0.57735], abs=1e-4)  # (s - 2/3) / std([1, 0, 1]) (unbiased)


def test_without_judge_failures_it_is_verls_grpo():
    rng = np.random.default_rng(0)
    scores = list(rng.uniform(0, 3, size=16))
    uids = [f"p{i // 8}" for i in range(16)]
    data = lambda: _batch(scores, [1] * 16, uids)  # noqa: E731
    assert _advantages("grpo_judged", data()) == pytest.approx(_advantages("grpo", data()), abs=1e-6)
