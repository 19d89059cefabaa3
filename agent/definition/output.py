"""The agent's result type: the tool through which the model gives a turn's machine result.

An agent that declares ``output_type`` (a pydantic model) is offered one more tool,
``final_result``, whose input schema is that model's. The model calls it once its
work is done, in the same reply as its answer to the person; the engine validates
the value and the turn completes with it as ``Completed.output``.

We never force the call with ``tool_choice``: the Messages API refuses a forced
tool while thinking is on (and the newest models always think), and a forced
call comes without the text the person is to read. A reply that forgets the
tool is asked again instead (see `agent.engine.turn.output`).
"""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import BaseModel

from agent._json import JsonValue
from agent.definition.tools import Tool
from agent.errors import ConfigError

__all__ = ["OUTPUT_TOOL", "output_tool"]

OUTPUT_TOOL = "final_result"

_DESCRIPTION = (
    "Give the result of this request, as the schema says. Call it once, when the work "
    "is done, in the same reply as your answer to the person: the request ends with it. "
    "If it says the result is invalid, call it again with the problems fixed."
)


def output_tool(output_type: type[BaseModel], *, agent: str) -> Tool:
    """The tool through which the model gives a value of ``output_type``.

    Raises:
        ConfigError: ``output_type`` is not a pydantic model.
    """
    if not (inspect.isclass(output_type) and issubclass(output_type, BaseModel)):
        raise ConfigError(
            f"agent {agent}: output_type must be a pydantic model (a BaseModel subclass), "
            f"not {output_type!r}"
        )
    own_doc = output_type.__dict__.get("__doc__")
    description = _DESCRIPTION + (f"\n\nThe result: {inspect.cleandoc(own_doc)}" if own_doc else "")

    async def give_result(**fields: Any) -> JsonValue:
        # `Tool.parse_input` validated the fields against the model already
        dumped: JsonValue = output_type.model_construct(**fields).model_dump(mode="json")
        return dumped

    return Tool(
        name=OUTPUT_TOOL,
        description=description,
        fn=give_result,
        is_local=False,
        input_model=output_type,
    )
