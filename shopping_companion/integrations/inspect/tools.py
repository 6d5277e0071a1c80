"""The four tools of the environment as Inspect tools (docs/integrations.md, "Inspect AI").

:func:`tool_infos` gives what the model is shown: one Inspect ``ToolInfo`` per tool, made from the
environment's own function schema (:func:`~shopping_companion.envs.tools.tool_schema`). Inspect's
JSON-schema model keeps the types, descriptions, defaults, ``minimum`` / ``maximum`` and
``required`` of our schemas and drops ``minItems`` / ``maxItems``, ``null`` defaults and the
top-level description (the function's description carries the same text); the list bounds still
hold, because every call is checked by the same argument models when it runs.

:func:`inspect_tools` gives runnable Inspect ``ToolDef`` objects over a
:class:`~shopping_companion.envs.tools.ToolBox`, for Inspect agents of your own (``react()``,
``use_tools``): each call goes through :meth:`ToolBox.execute` with the stage's allowed tools and
returns exactly the observation text the environment would show (error observations included).
The benchmark task itself (:mod:`.task`) runs calls through the environment instead, which adds the
per-turn rules of an episode (repeated calls, calls per turn, argument size limits).
"""

from __future__ import annotations

import itertools
from typing import Any

from inspect_ai.tool import ToolDef, ToolInfo, ToolParams

from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, ToolBox, tool_schema
from shopping_companion.types import ToolCall

__all__ = ["ALL_TOOLS", "inspect_tools", "tool_infos"]

#: Every tool name, memory tools first (the order of the one-stage mode).
ALL_TOOLS: tuple[str, ...] = MEMORY_TOOLS + PRODUCT_TOOLS


def _info(name: str) -> ToolInfo:
    fn = tool_schema(name)["function"]
    params = {k: v for k, v in fn["parameters"].items() if k != "description"}
    return ToolInfo(name=fn["name"], description=fn["description"], parameters=ToolParams.model_validate(params))


def tool_infos(names: tuple[str, ...] | list[str]) -> list[ToolInfo]:
    """Inspect ``ToolInfo`` of each tool in ``names`` (module docstring), in that order. Raises
    ``ValueError`` naming the known tools for an unknown name."""
    unknown = [n for n in names if n not in ALL_TOOLS]
    if unknown:
        raise ValueError(f"tools: unknown tool(s) {unknown}; known: {', '.join(ALL_TOOLS)}")
    return [_info(n) for n in names]


def inspect_tools(toolbox: ToolBox, names: tuple[str, ...] | list[str] = ALL_TOOLS) -> list[ToolDef]:
    """Runnable Inspect tools over ``toolbox`` (module docstring): one ``ToolDef`` per name, whose
    call returns the observation text of :meth:`ToolBox.execute` with ``names`` as the allowed
    tools. A backend that cannot be reached raises what ``execute`` raises."""
    allowed = tuple(names)
    counter = itertools.count()

    def make(info: ToolInfo) -> ToolDef:
        async def execute(**arguments: Any) -> str:
            call = ToolCall(call_id=f"inspect{next(counter)}", name=info.name, arguments=arguments)
            return toolbox.execute(call, allowed).content

        return ToolDef(execute, name=info.name, description=info.description, parameters=info.parameters)

    return [make(info) for info in tool_infos(allowed)]
