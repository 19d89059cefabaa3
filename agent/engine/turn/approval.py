"""The engine's own approval of a call, for tools declared ``requires_approval``.

Before such a call runs, the engine asks on its behalf (as the tool would with
``ctx.request_input``): a yes/no request keyed by the call, answered by the
turn's attested speaker. A yes runs the call; a no, or no answer in time, gives
the model a result saying it was not run. Because the engine asks before the
call starts, a plain ``def`` tool can require approval too: its transaction
opens only once the answer is in.
"""

from __future__ import annotations

from pydantic_core import to_json

from agent._json import JsonValue
from agent.core.hitl import InputRequest, InputRequired, answer_step, answerers_from
from agent.core.messages import ToolCall
from agent.engine.turn.context import RunContext

__all__ = ["approval_id", "approved_or_declined"]

_INPUT_SHOWN = 300
"""Characters of the call's input shown in the prompt; the card shows the rest."""


def approval_id(call: ToolCall) -> str:
    """The id of the request that approves ``call``: one per call, so no answer is reused."""
    return f"approve:{call.id}"


async def approved_or_declined(run: RunContext, call: ToolCall) -> JsonValue:
    """None if a person approved ``call``; the result to record if they did not.

    Raises:
        InputRequired: Nobody has answered yet: the turn suspends on the request.
        ToolError: Nobody could be trusted to answer (the speaker is not attested).
    """
    answers = await run.answers()
    stored = answers.get(answer_step(run.turn_id, approval_id(call)))
    if isinstance(stored, dict):
        if stored.get("expired"):
            return {"denied": True, "error": "not run: nobody approved this call in time"}
        if stored.get("value") is True:
            return None
        who = stored.get("by")
        return {"denied": True, "error": f"not run: {who or 'the approver'} declined this call"}
    shown = to_json(call.input).decode()
    if len(shown) > _INPUT_SHOWN:
        shown = shown[: _INPUT_SHOWN - 1] + "…"
    request = InputRequest(
        id=approval_id(call),
        prompt=f"Allow {call.name} to run with {shown}?",
        call_id=call.id,
        tool=call.name,
        schema={"type": "boolean"},
        answerers=answerers_from(None, run.record.input.event),
    )
    raise InputRequired(request)
