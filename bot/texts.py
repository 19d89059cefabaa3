"""Every sentence the bot says to a person, in one place."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agent import ResumeConflictError

if TYPE_CHECKING:
    from bot.policies import ChannelPolicy

NEEDS_CREDENTIALS = """\
For the real bot, create the Slack app from manifest.yml
(https://api.slack.com/apps -> Create New App -> From an app manifest), install it,
then set in the environment or a .env file:
  SLACK_BOT_TOKEN       xoxb-... (OAuth & Permissions)
  SLACK_SIGNING_SECRET  (Basic Information) for HTTP events, or
  SLACK_APP_TOKEN       xapp-... (Socket Mode, no public URL needed)
  ANTHROPIC_API_KEY     for Claude (without it, an offline demonstration model answers)
To install in many workspaces instead of one, set SLACK_CLIENT_ID, SLACK_CLIENT_SECRET
and SLACK_STATE_SECRET (with SLACK_SIGNING_SECRET) in place of SLACK_BOT_TOKEN, and send
people to /slack/install.
"""

NO_CONFIG = "No schedules: set BOT_CONFIG to a TOML file with [[schedules]] entries."
SCHEDULES_NEED_SLACK = (
    "a schedule posts into Slack: set SLACK_BOT_TOKEN with SLACK_SIGNING_SECRET or "
    "SLACK_APP_TOKEN (see manifest.yml)"
)


def local_mode(address: str, model: str, offline: bool, database: str) -> str:
    """What ``python -m bot`` says when it serves the console (no Slack credentials)."""
    answering = (
        f"{model}: it says so in every reply, and still runs a tool, an approval and "
        "a note for real"
        if offline
        else f"Claude ({model})"
    )
    return (
        f"No Slack credentials found: serving the web console and the API.\n\n"
        f"  Open {address} in your browser (the API is under {address}api/).\n\n"
        f"Answering: {answering}.\n"
        f"Each message is a durable turn stored in {database}; stop this process at any\n"
        "point and start it again: unfinished turns resume. Ctrl+C stops.\n\n" + NEEDS_CREDENTIALS
    )


API_NEEDS_TOKENS = (
    "The web console and its API are off beside Slack: set API_TOKENS (a JSON object of "
    "bearer token to principal id) to serve them on this port."
)


STOPPING_SLACK = "Stopping: no new events; replies in flight get a few seconds."
STOPPING_LOCAL = "Stopping: unfinished turns stay on disk and resume at the next start."


def schedules_need_team(names: list[str]) -> str:
    """Why schedules cannot start where the app is installed in many workspaces."""
    listed = ", ".join(repr(n) for n in names)
    return (
        f"schedule(s) {listed}: with OAuth installs each schedule needs team = "
        '"T0123456789", the workspace its channel is in'
    )


def health_check_on(port: int) -> str:
    """What the bot says in Socket Mode, where ``/healthz`` is all it serves over HTTP."""
    return f"Serving the health check on http://0.0.0.0:{port}/healthz."


def api_beside_slack(port: int) -> str:
    """What the bot says when it serves the console and the API beside Slack."""
    return f"Serving the web console and the API on http://0.0.0.0:{port}/ (bearer tokens)."


def offline_intro(database: str) -> str:
    """What the offline demo says before it starts."""
    return (
        f"Offline demo: each line you type is a durable turn stored in {database}.\n"
        "Kill this process at any point and run it again: unfinished turns resume.\n"
    )


def terminal_with_claude(model: str, database: str) -> str:
    """What the terminal chat says when it talks to Claude."""
    return (
        f"No Slack credentials found: chatting with Claude ({model}) in this terminal.\n"
        f"Each line you type is a durable turn stored in {database}; an empty line ends.\n"
        "For the Slack bot, create the app from manifest.yml and set SLACK_BOT_TOKEN\n"
        "with SLACK_SIGNING_SECRET (HTTP) or SLACK_APP_TOKEN (Socket Mode).\n"
    )


# -- in Slack threads ----------------------------------------------------------------

FAILED_PREFIX = "Sorry, I could not finish this:"
SUPERSEDED = "_(superseded by a newer message)_"
RETRYING = "_(the reply broke off; asking again)_"
FOLLOW_UP_TAKEN = "Taking in a follow-up"
"""The task line of a message that steered the reply being written."""
CANCELLED = {
    "replaced": SUPERSEDED,
    "requested": "_(cancelled)_",
    "reset": "_(stopped: this conversation was reset)_",
    "withdrawn": "_(withdrawn by an admin)_",
    "deleted": "_(stopped: the question was deleted)_",
}
HELD = (
    "_(stopped: the bot went down each time it ran this turn, so it is held and will not "
    "run again by itself; an operator can retry or drop it with `python -m bot turns --held`)_"
)
INTERRUPTED = {
    "held": HELD,
    "timeout": "_(stopped: this took longer than a turn may)_",
    "interrupted": "_(interrupted by an operator)_",
    "lost": "_(stopped: the bot went down while answering this, and does not pick such "
    "answers up again)_",
}
"""The closing line of a turn that ended interrupted, by its reason (`INTERRUPT_REASONS`)."""
WORKING = "Working on it… Stop ends this turn here."
"""The message with the Stop button that a thread shows while its turn is at work."""


def stopped_by(by: str) -> str:
    """The closing line of a turn someone stopped from Slack (its Stop button)."""
    return f"_(stopped by <@{by}>)_"


def withdrawn_by(by: str) -> str:
    """The closing line of a turn whose request an admin withdrew."""
    return f"_(withdrawn by <@{by}>)_"


def held_firing(turn_id: str, reason: str, detail: str) -> str:
    """Why a schedule fired by hand did not deliver: its turn was interrupted (held)."""
    if reason != "held":
        return f"the turn was interrupted ({reason}): {detail}"
    return (
        f"the turn {turn_id} is held: the bot went down each time it ran it, so it will not "
        "run again by itself (firing the schedule again replays the same held turn). "
        f"Retry it with `python -m bot turns --held --retry {turn_id}`, or drop it with "
        f"`--drop {turn_id}`."
    )


def interrupted(reason: str, detail: str) -> str:
    """The closing line of a turn stopped for good rather than cancelled (``turn.interrupted``)."""
    return INTERRUPTED.get(reason) or f"_(stopped: {detail or reason})_"


WAITING_FOR_APPROVAL = (
    "This thread is waiting for an approval above; answer it first, then ask again."
)
"""Said when the request is not known (it was settled meanwhile); see `waiting_for_approval`."""


def waiting_for_approval(who: str, until: str | None) -> str:
    """Told privately to someone whose message a thread waiting on a request cannot take."""
    ends = (
        f" If nobody answers, it expires {until} and the thread takes messages again."
        if until is not None
        else ""
    )
    return (
        f"This thread is waiting for the request above, which only {who} can answer; "
        f"your message was not taken.{ends} An admin may withdraw the request."
    )


ONLY_ADMINS_WITHDRAW = "Only an admin can withdraw a request."
ONLY_PARTICIPANTS_STOP = "Only the people in this thread, and admins, can stop its turn."
ONLY_PARTICIPANTS_RESET = "Only the people in this thread, and admins, can start it over."
NOT_A_THREAD = "This message is not in a conversation of mine: there is nothing to start over."
NOTHING_TO_STOP = "This reply has finished: there is nothing to stop."
NOTHING_TO_WITHDRAW = "This request is no longer waiting for an answer."
RETRY_OFFER = "This reply did not finish. Retry asks the same question again."
"""Beside the Retry button under a failed or interrupted reply."""
ONLY_ASKER_RETRIES = "Only the person who asked this, and admins, can retry it."
NOTHING_TO_RETRY = "This question cannot be asked again from here: it was answered or reset."


def retried_by(by: str, at: str) -> str:
    """The Retry message once someone took it."""
    return f"Retried by <@{by}> {at}"


ANSWER_BY_MODAL_FAILED = "The answer form could not be opened just now; please try again."


def withdrawn(by: str) -> str:
    """The card of a request an admin withdrew."""
    return f"Withdrawn by <@{by}>"


def thread_reset(by: str) -> str:
    """Said in a thread that was started over."""
    return (
        f"<@{by}> started this conversation over: I no longer see what was said above "
        "(it is archived). Mention me to begin again."
    )


def invalid_answer(reason: str) -> str:
    """Shown under the answer field of a modal, when the answer does not fit the request."""
    return f"That answer does not fit: {reason}"


EXPIRED_REQUEST = "Expired: nobody answered in time"
CLICK_FAILED = "That click could not be applied just now; please try again."


def only_answerers(who: str) -> str:
    """Told privately to someone who may not answer a request."""
    return f"Only {who} can answer this request."


def not_waiting(error: ResumeConflictError) -> str:
    """Told privately to someone who clicked on a request that is settled."""
    if error.expired:
        return "This request expired before anyone answered it."
    if error.answered_by is not None:
        how = (
            "approved"
            if error.answer is True
            else "denied"
            if error.answer is False
            else "answered"
        )
        return f"This was already {how} by <@{error.answered_by}>."
    return "This request is no longer waiting for an answer."


def policy_lines(view: ChannelPolicy, *, in_slack: bool) -> list[str]:
    """A channel's effective policy in a few lines: for ``policies``, ``/agent-policy`` and Home."""
    where = "Default for Slack (any other channel, DMs)"
    if view.channel is not None:
        where = f"<#{view.channel}>" if in_slack else f"Channel {view.channel}"
    origin = []
    if view.from_file:
        origin.append("BOT_CONFIG")
    if view.changed_by is not None:
        who = f"<@{view.changed_by}>" if in_slack else view.changed_by
        when = _date(view.changed_at) if view.changed_at is not None else "?"
        origin.append(f"changed in Slack by {who} on {when}")
    header = where + (f" ({'; '.join(origin)})" if origin else "")
    if in_slack:
        header = f"*{header}*"
    denied = ", ".join(view.policy.deny_tools) or "none"
    return [
        header,
        f"  tools offered: {', '.join(view.offered) or 'none'}",
        f"  tools denied: {denied}",
        f"  prompt: {' + '.join(view.prompt)}",
    ]


POLICY_HELP = """\
`/agent-policy` shows this channel's policy to admins, who can change it:
• `/agent-policy deny TOOL`, or `allow TOOL` to take back a deny made here
• `/agent-policy instructions TEXT` sets this channel's instructions, in place of \
BOT_CONFIG's; `instructions clear` goes back to them
• `/agent-policy mode overlay` adds them to the prompt; `mode replace` makes them the whole prompt
• `/agent-policy reset` forgets every change made from Slack
Changes apply from the next turn in this channel; BOT_CONFIG's denies stay."""

NO_POLICIES = "This bot keeps no policies."
ONLY_ADMINS_CHANGE_POLICIES = (
    "Only workspace admins (and the bot's admins in BOT_CONFIG) can see or change "
    "this channel's policy."
)
NOT_A_CHANNEL = "Policies are kept per channel: use /agent-policy in a channel."

FEEDBACK_THANKS = "Thanks for the feedback! Anything to add?"
FEEDBACK_THANKS_BAD = "Thanks for the feedback. What went wrong?"
FEEDBACK_GONE = "That reply is gone (or was never mine to rate): nothing was kept."
FEEDBACK_FAILED = "Your feedback could not be kept just now; please try again."
FEEDBACK_EMPTY = "Write a few words, or close the form."
NOT_MY_FORM = "This form is not one of mine."


def _date(at: float) -> str:
    return f"{datetime.fromtimestamp(at, UTC):%Y-%m-%d %H:%M} UTC"
