"""The fake Slack's agent-surface methods: suggested prompts, thread titles, agent sessions.

Checked against docs.slack.dev (2026-12):

- ``assistant.threads.setSuggestedPrompts``: ``channel_id`` and ``prompts`` required,
  each prompt an object with ``title`` and ``message``, "up to four"; ``thread_ts`` and
  ``title`` optional. Under ``agent_view`` "including [thread_ts] in a call for an agent
  app will cause the call to silently fail": the fake answers ok and sets nothing, so a
  test sees that the prompts never showed.
- ``assistant.threads.setTitle``: ``channel_id``, ``thread_ts``, ``title`` required.
- ``agents.sessions.setStatus``: ``status`` required, one of ``active processing
  suspended closed``; ``thread_ts`` required for a thread-based session; ``title``
  (at most 200 characters) and ``initiator_user_id`` are used only when the session is
  created and ignored after. Without a subscription to ``agent_session_stopped`` it
  answers ok with the warning ``missing_agent_session_stopped_event_subscription``.
- ``agents.sessions.rename``: ``channel_id`` and ``title`` required.

What is not modelled: which apps Slack counts as agents (every app is one here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.fakes.slack_blocks import Refusal

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.fakes.slack_api import FakeSlack, _Params

__all__ = ["SESSION_STATUSES", "AgentSurface", "SessionState"]

Json = dict[str, Any]

SESSION_STATUSES = frozenset({"active", "processing", "suspended", "closed"})
MAX_PROMPTS = 4
MAX_SESSION_TITLE = 200


@dataclass
class SessionState:
    """One thread's agent session as Slack holds it."""

    status: str
    title: str | None
    initiator: str | None
    history: list[str] = field(default_factory=list)
    """Every status it was set to, in order."""


@dataclass
class AgentSurface:
    """What the agent-surface methods set, for tests to read back."""

    slack: FakeSlack
    agent_view: bool = True
    """The app declares ``agent_view`` (True) or the legacy ``assistant_view``."""
    stop_subscribed: bool = True
    """The app subscribes to ``agent_session_stopped``: Slack shows its Stop button."""
    prompts: dict[tuple[str, str | None], Json] = field(default_factory=dict)
    """The prompts shown, by (channel, thread) — thread None for an agent app's DM."""
    titles: dict[tuple[str, str], str] = field(default_factory=dict)
    sessions: dict[tuple[str, str | None], SessionState] = field(default_factory=dict)

    def methods(self) -> dict[str, Callable[[_Params], Json]]:
        return {
            "assistant.threads.setSuggestedPrompts": self._set_prompts,
            "assistant.threads.setTitle": self._set_title,
            "agents.sessions.setStatus": self._set_session_status,
            "agents.sessions.rename": self._rename_session,
        }

    def session(self, channel: str, thread_ts: str | None) -> SessionState | None:
        return self.sessions.get((channel, thread_ts))

    def _set_prompts(self, params: _Params) -> Json:
        channel = self.slack._channel(params, name="channel_id")
        prompts = params.structured("prompts", "invalid_arguments")
        if prompts is None:
            raise Refusal("invalid_arguments", messages=["missing required field: prompts"])
        if not isinstance(prompts, list) or not 0 < len(prompts) <= MAX_PROMPTS:
            raise Refusal("invalid_arguments", messages=["prompts: between 1 and 4"])
        for prompt in prompts:
            if not (
                isinstance(prompt, dict)
                and set(prompt) == {"title", "message"}
                and all(isinstance(v, str) and v for v in prompt.values())
            ):
                raise Refusal("invalid_arguments", messages=["prompts: each a title and message"])
        thread_ts = params.text("thread_ts")
        if thread_ts is not None and thread_ts not in channel.messages:
            raise Refusal("invalid_thread_ts")
        if thread_ts is not None and self.agent_view:
            return {}  # "silently fail" for an agent app
        self.prompts[(channel.id, thread_ts)] = {"title": params.text("title"), "prompts": prompts}
        return {}

    def _set_title(self, params: _Params) -> Json:
        channel = self.slack._channel(params, name="channel_id")
        thread_ts = params.required("thread_ts")
        if thread_ts not in channel.messages:
            raise Refusal("invalid_thread_ts")
        self.titles[(channel.id, thread_ts)] = params.required("title")
        return {}

    def _set_session_status(self, params: _Params) -> Json:
        status = params.text("status")
        if status is None:
            raise Refusal("invalid_arguments", messages=["missing required field: status"])
        if status not in SESSION_STATUSES:
            raise Refusal("invalid_arguments", messages=["status: unknown value"])
        channel = self.slack._channel(params, name="channel_id")
        thread_ts = params.text("thread_ts")
        if thread_ts is not None and thread_ts not in channel.messages:
            raise Refusal("thread_not_found")
        title = params.text("title")
        if title is not None and len(title) > MAX_SESSION_TITLE:
            raise Refusal("invalid_arguments", messages=["title: at most 200 characters"])
        key = (channel.id, thread_ts)
        state = self.sessions.get(key)
        if state is None:
            state = self.sessions[key] = SessionState(
                status, title, params.text("initiator_user_id")
            )
        state.status = status
        state.history.append(status)
        answer: Json = {"status": status, "title": state.title}
        if status == "processing" and not self.stop_subscribed:
            answer["warning"] = "missing_agent_session_stopped_event_subscription"
        return answer

    def _rename_session(self, params: _Params) -> Json:
        channel = self.slack._channel(params, name="channel_id")
        title = params.required("title")
        if len(title) > MAX_SESSION_TITLE:
            raise Refusal("invalid_arguments", messages=["title: at most 200 characters"])
        state = self.sessions.get((channel.id, params.text("thread_ts")))
        if state is None:
            raise Refusal("session_not_found")
        state.title = title
        return {"title": title}
