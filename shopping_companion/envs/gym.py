"""A gymnasium adapter for :class:`~shopping_companion.envs.env.ShoppingCompanionEnv` (docs/architecture.md, the environment).

Text in, text out, as in tau2-bench's gym interface: an action is the assistant's turn (a string
in the Hermes convention of :mod:`~shopping_companion.envs.parsing`), an observation is the text
of the messages the environment appended since the previous action, rendered by
:func:`render_messages`. The structured view — the current stage's full chat as OpenAI-style
dicts and the tool schemas — is in ``info["messages"]`` and ``info["tools"]``, which is what an
LLM policy actually needs.

Spaces: :class:`TextSpace`, a small :class:`gymnasium.spaces.Space` subclass for unbounded
unicode strings (``gymnasium.spaces.Text`` needs a finite charset and a maximum length; model
turns and tool observations have neither).

Episode semantics (gymnasium ≥ 0.26): ``reward`` is the ending stage's total reward (Eq. 12)
on the step where a stage ends, else 0.0. ``terminated`` is True when the last stage ended with
an answer, or ended by the environment for the model's output (``invalid_output`` / ``length``:
``EnvConfig.max_invalid_turns`` consecutive invalid turns; ``info["termination"]`` says which);
``truncated`` is True when it ended by hitting ``max_turns`` (a time limit in gymnasium's sense).
An action may also be an :class:`~shopping_companion.llm.base.AssistantMessage` (or its dict),
carrying ``reasoning`` and ``finish_reason``. A stage-1 turn limit in ``two_stage`` mode does not end the episode (stage 2
starts), so it is neither. After the episode ends, :meth:`ShoppingCompanionGymEnv.result` gives
the :class:`~shopping_companion.types.EpisodeResult`.

``gymnasium.make("ShoppingCompanion-v0", task=..., toolbox=..., judge=...)`` works once this
module is imported. gymnasium deep-copies those kwargs when it re-makes an environment from its
spec (``env.spec.make()``, used by its checker): a :class:`~shopping_companion.envs.tools.ToolBox`
shares its services on copy; give a judge (and simulator) that can be deep-copied, e.g. a
``RuleJudge`` over a plain function, or build environments with :func:`make_gym_env` directly.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import gymnasium
import numpy as np
from gymnasium import spaces

from shopping_companion.envs.env import EnvConfig, Judge, ShoppingCompanionEnv
from shopping_companion.envs.tools import ToolBox
from shopping_companion.types import EpisodeResult, Task

__all__ = ["TextSpace", "ShoppingCompanionGymEnv", "make_gym_env", "render_messages", "ENV_ID"]

ENV_ID = "ShoppingCompanion-v0"

#: Characters :meth:`TextSpace.sample` draws from: ASCII letters, digits, punctuation, space,
#: newline, and some non-ASCII text (accents, CJK, emoji) so samplers exercise unicode paths.
_SAMPLE_CHARS = tuple(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?'\"()[]{}<>/@#-_\n"
    "éüñßçøåπλж中文字ひらがな한국🙂🛒"
)


class TextSpace(spaces.Space[str]):
    """Unbounded unicode text: any ``str`` (up to ``max_length`` characters when given).

    ``gymnasium.spaces.Text`` requires a finite character set and a maximum length, which an LLM
    turn or a tool observation does not have. Not flattenable (``is_np_flattenable`` is False).
    :meth:`sample` returns a random string of 0..``sample_max_length`` characters drawn from a
    mixed ASCII/unicode alphabet with the space's seeded ``np_random`` (so it is reproducible).
    """

    def __init__(
        self, max_length: int | None = None, sample_max_length: int = 64, seed: int | np.random.Generator | None = None
    ):
        if max_length is not None and max_length < 0:
            raise ValueError(f"max_length: must be >= 0 or None, got {max_length}")
        if sample_max_length < 0:
            raise ValueError(f"sample_max_length: must be >= 0, got {sample_max_length}")
        self.max_length = max_length
        self.sample_max_length = sample_max_length if max_length is None else min(sample_max_length, max_length)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            raise NotImplementedError("TextSpace.sample does not support masks or probabilities")
        n = int(self.np_random.integers(0, self.sample_max_length + 1))
        idx = self.np_random.integers(0, len(_SAMPLE_CHARS), size=n)
        return "".join(_SAMPLE_CHARS[i] for i in idx)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and (self.max_length is None or len(x) <= self.max_length)

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length

    def to_jsonable(self, sample_n: Any) -> list[str]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[str]) -> list[str]:
        return list(sample_n)


def render_messages(messages: list[dict[str, Any]]) -> str:
    """Messages as text: one block per message, ``[role]`` (``[tool name]`` for tool results)
    on its own line followed by the content; blocks separated by blank lines."""
    blocks = []
    for m in messages:
        role = m.get("role", "?")
        head = f"[tool {m.get('name')}]" if role == "tool" and m.get("name") else f"[{role}]"
        blocks.append(f"{head}\n{m.get('content', '')}")
    return "\n\n".join(blocks)


#: Keyword options of :class:`ShoppingCompanionEnv` the gym environment passes on.
_ENV_OPTIONS = ("reward_fn", "simulator", "sessions", "token_counter")


class ShoppingCompanionGymEnv(gymnasium.Env[str, str]):
    """``gymnasium.Env`` over one task (a new :class:`ShoppingCompanionEnv` per ``reset``).

    Args: as :class:`ShoppingCompanionEnv`: ``task``, ``toolbox`` (its ``tools``), ``judge``,
    ``config`` and, as keywords, its other options (``reward_fn``, ``simulator``, ``sessions``,
    ``token_counter``; another keyword raises ``TypeError``); ``simulator_factory`` (optional)
    builds a fresh simulator per reset instead of sharing ``simulator``; ``render_mode``: None or
    ``"ansi"`` (else ``ValueError``).

    ``reset(seed=None, options=None) -> (observation, info)``; ``options`` may hold
    ``{"config": EnvConfig | dict}`` to change the mode/hint for this episode.
    ``step(action: str) -> (observation, reward, terminated, truncated, info)``; info has the
    environment's step info plus ``messages``, ``tools``, ``stage``, ``done``. Stepping after the
    episode ended, or before reset, raises ``RuntimeError``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # fps is meaningless for text; must be > 0

    def __init__(
        self,
        task: Task,
        toolbox: ToolBox,
        judge: Judge,
        config: EnvConfig | None = None,
        *,
        simulator_factory: Callable[[], Any] | None = None,
        render_mode: str | None = None,
        **env_options: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode: must be None or one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        unknown = sorted(set(env_options) - set(_ENV_OPTIONS))
        if unknown:
            raise TypeError(
                f"{type(self).__name__}: unexpected keyword(s) {', '.join(unknown)}; allowed: "
                f"{', '.join(_ENV_OPTIONS)}, simulator_factory, render_mode"
            )
        self.task = task
        self.toolbox = toolbox
        self.judge = judge
        self.config = config or EnvConfig()
        #: the keyword options passed on to each episode's :class:`ShoppingCompanionEnv`
        self.env_options = env_options
        self.simulator_factory = simulator_factory
        self.render_mode = render_mode
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self.env: ShoppingCompanionEnv | None = None
        self._last_obs = ""

    # ------------------------------------------------------------------ gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        cfg = self.config
        if options and options.get("config") is not None:
            raw = options["config"]
            cfg = raw if isinstance(raw, EnvConfig) else EnvConfig.model_validate(raw)
        env_options = dict(self.env_options)
        if self.simulator_factory is not None:
            env_options["simulator"] = self.simulator_factory()
        self.env = ShoppingCompanionEnv(self.task, self.toolbox, self.judge, cfg, **env_options)
        messages, info = self.env.reset(seed=seed)
        obs = render_messages(messages)
        self._last_obs = obs
        return obs, self._info(dict(info))

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.env is None:
            raise RuntimeError("call reset() before step()")
        out = self.env.step(action)
        obs = render_messages(out.observations)
        self._last_obs = obs
        terminated = bool(out.terminated and not out.truncated)
        truncated = bool(out.terminated and out.truncated)
        info = self._info(dict(out.info))
        return obs, float(out.reward), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        return None

    def close(self) -> None:
        self.env = None

    # ------------------------------------------------------------------ helpers

    def _info(self, base: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        assert env is not None
        info = copy.deepcopy(base)
        info["messages"] = env.messages
        info["tools"] = copy.deepcopy(env.tool_schemas)  # the env's list is shared
        info["stage"] = env.stage
        info["done"] = env.done
        return info

    def result(self, policy: str = "gym", trial: int = 0) -> EpisodeResult:
        """The judged episode so far (after it ended: both stages, verdicts, rewards)."""
        if self.env is None:
            raise RuntimeError("call reset() first")
        return self.env.episode_result(policy=policy, trial=trial, seed=0)


def make_gym_env(
    task: Task, toolbox: ToolBox, judge: Judge, config: EnvConfig | None = None, **kwargs: Any
) -> ShoppingCompanionGymEnv:
    """Build a :class:`ShoppingCompanionGymEnv` from (task, toolbox, judge); ``kwargs`` as its
    constructor (``reward_fn``, ``simulator``, ``sessions``, ``token_counter``, ``simulator_factory``,
    ``render_mode``)."""
    return ShoppingCompanionGymEnv(task, toolbox, judge, config, **kwargs)


if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point=make_gym_env, disable_env_checker=True, nondeterministic=False)
