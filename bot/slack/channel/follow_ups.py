"""Follow-ups: a message in a thread whose turn is still at work, taken as the channel says.

Per channel (``BOT_CONFIG``'s ``[follow_ups]``), a follow-up supersedes the
reply being written (``replace``, the default), is added to the turn at work
(``steer``: the model reads it before its next call, and the reply shows it was
taken in), or waits for the turn to end (``queue``). A steer the engine refuses
(the reply was finishing, the turn stopping) starts a turn of its own instead,
so no message goes unanswered.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agent import SteerRefusedError, TurnRecord

if TYPE_CHECKING:
    from agent import AgentSession
    from bot.slack.inbound import Inbound

__all__ = ["steered"]

logger = logging.getLogger("bot.slack")


async def steered(session: AgentSession, inbound: Inbound, turns: list[TurnRecord]) -> bool:
    """Add ``inbound`` to the thread's turn at work; False when it is to be a turn of its own.

    The steer's id is the message's turn id, so the same message delivered again is
    taken once.
    """
    if all(t.is_ended for t in turns):
        return False  # nothing at work (or waiting) in the thread
    try:
        taken = await session.steer(
            inbound.input.text, steer_id=inbound.turn_id, by=inbound.input.user
        )
    except SteerRefusedError as refused:
        logger.info(
            "%s: follow-up %s is a turn of its own: %s", session.key, inbound.turn_id, refused
        )
        return False
    logger.info("%s: follow-up %s steers turn %s", session.key, inbound.turn_id, taken.turn_id)
    return True
