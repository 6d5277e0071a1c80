"""The viewer's episode page shows the decisions behind a verdict (issue 32, item 1): every item
with its confidence, reason and who decided it, escaped, folded open when one is uncertain."""

from __future__ import annotations

import html as html_lib
from pathlib import Path

from shopping_companion.judges.rule import RuleJudge
from shopping_companion.types import EpisodeResult, RewardBreakdown, StageResult
from shopping_companion.viewer.app import create_app
from shopping_companion.viewer.store import RunCatalog
from tests.judges.test_selective_verdicts import SESSIONS, lookup, s1, s2, task
from tests.viewer.test_viewer_app import local_client, write_run

XSS = "<b onclick=x>x"


def test_episode_page_lists_items_with_confidence_reason_and_decider(tmp_path: Path):
    t = task()
    judge = RuleJudge(lookup, sessions=SESSIONS)
    traj1 = s1(("colour", f"my usual {XSS}"), ("fabric", "cotton"))
    traj2 = s2("p:navy")
    v1, v2 = judge.judge(t, traj1), judge.judge(t, traj2)
    assert v1.uncertain and not v2.uncertain
    reward = RewardBreakdown(total=0.5, components={"R_z": 0.5})
    ep = EpisodeResult(
        task_id=t.task_id,
        task_type="single",
        mode="two_stage",
        policy="p",
        stages=[
            StageResult(trajectory=traj1, verdict=v1, reward=reward),
            StageResult(trajectory=traj2, verdict=v2, reward=reward),
        ],
        acc=0.5,
        succ=True,
        wall_s=1.0,
    )
    write_run(tmp_path / "runs" / "sel", [ep], [t])
    page = local_client(create_app(RunCatalog([tmp_path / "runs"]))).get("/runs/sel/episodes/1").text
    assert XSS not in page
    stage1 = page[page.index('id="stage-1"') : page.index('id="stage-2"')]
    stage2 = page[page.index('id="stage-2"') :]
    # stage 1: open, the uncertain count, the policy, each item with its reason and decider
    assert '<details class="decisions gold" open>' in stage1
    assert f"{v1.uncertain} uncertain</span>, scored no_credit" in stage1
    assert stage1.count("<tr><td title=") == len(v1.items)
    assert stage1.count(">uncertain: value_outside_vocabulary</span>") == 2  # the miss and the answer preference
    assert html_lib.escape(f"colour=my usual {XSS}", quote=False) in stage1
    # stage 2: every decision confident, folded
    assert '<details class="decisions gold">' in stage2 and "all confident" in stage2
    assert stage2.count(">confident<") == len(v2.items) and "uncertain:" not in stage2.split("Reward")[0]
