"""The Shopping Companion benchmark in Inspect AI (docs/integrations.md, "Inspect AI"): the task
``shopping_companion/bench`` (:mod:`.task`), the episode as solver steps (:mod:`.solvers`), the four
tools as Inspect tools (:mod:`.tools`) and the scorer with Acc, Succ and the reward components
(:mod:`.scorer`). Needs the ``inspect`` extra (``scripts/install_inspect.sh``).

Importing this module registers the task; Inspect imports it through the package's ``inspect_ai``
entry point when it is asked for a ``shopping_companion/...`` task.
"""

from shopping_companion.integrations.inspect.scorer import shopping_scorer
from shopping_companion.integrations.inspect.solvers import play_stage, shopping_episode, user_simulator
from shopping_companion.integrations.inspect.task import bench
from shopping_companion.integrations.inspect.tools import inspect_tools, tool_infos

__all__ = [
    "bench",
    "inspect_tools",
    "play_stage",
    "shopping_episode",
    "shopping_scorer",
    "tool_infos",
    "user_simulator",
]
