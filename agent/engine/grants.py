"""Granting an answer to a policy answerer: the one async check a host runs before ``resume``."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from agent.core.hitl import AnswerCheck, AuthorizeAnswer, Grant, PolicyAnswerer
from agent.errors import AuthorizeAnswerError, ResumeAuthorizationError, ResumeConflictError

if TYPE_CHECKING:
    from agent.engine.session import AgentSession

__all__ = ["grant_answer"]


async def grant_answer(
    session: AgentSession,
    *,
    turn_id: str,
    input_id: str,
    by: str | None,
    principal: Any = None,
    authorize_answer: AuthorizeAnswer | None = None,
) -> Grant | None:
    """Ask the agent's ``authorize_answer`` hook whether this resumer may answer.

    The one async step a host runs before ``resume`` for a policy answerer. For
    any other request it grants nothing and the resume checks ``by`` itself.

    Returns:
        The grant to pass to ``resume``, or None when the request needs none.

    Raises:
        ResumeConflictError: The turn is not waiting for ``input_id``.
        ResumeAuthorizationError: The hook said no, or there is no hook.
        AuthorizeAnswerError: The hook raised; nothing was applied, so retry.
    """
    suspended = await session.suspended()
    request = None
    if suspended is not None and suspended.turn_id == turn_id:
        request = suspended.request_for(input_id)
    if request is None:
        raise ResumeConflictError(f"{session.key}: turn {turn_id} is not waiting for {input_id}")
    if (child := request.child) is not None:
        # a mirror of a child turn's request: granted as the child's request says
        return await session.runtime.delegations.grant(
            child, by=by, principal=principal, hook=authorize_answer
        )
    who = request.answerers
    if not isinstance(who, PolicyAnswerer):
        return None
    hook = authorize_answer or session.agent.authorize_answer
    if hook is None:
        raise ResumeAuthorizationError(
            f"agent {session.key.agent} has no authorize_answer hook to decide {who.policy!r}"
        )
    check = AnswerCheck(
        turn_id=turn_id,
        request=request,
        policy=who.policy,
        scope=who.scope,
        by=by,
        principal=principal,
    )
    try:
        decided = hook(check)
        allowed = await decided if inspect.isawaitable(decided) else decided
    except Exception as exc:
        raise AuthorizeAnswerError(
            f"authorize_answer failed for turn {turn_id}; the answer was not applied"
        ) from exc
    if allowed is not True:
        raise ResumeAuthorizationError(
            f"turn {turn_id}: not granted to answer for policy {who.policy!r}"
        )
    return Grant(policy=who.policy, scope=who.scope, turn_id=turn_id, input_id=input_id, by=by)
