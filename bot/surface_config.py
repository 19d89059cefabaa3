"""What a person sees before they ask: the greeting, the suggested prompts, the loading lines.

``[agent_surface]`` in ``BOT_CONFIG`` overrides the defaults::

    [agent_surface]
    greeting = "Hi! Ask me about this workspace."
    loading_messages = ["Reading the room…", "Thinking it over…"]

    [[agent_surface.prompts]]
    title = "Summarize a channel"
    message = "Summarize what happened in #general today."

Slack shows at most four suggested prompts (``assistant.threads.setSuggestedPrompts``, and
``suggested_prompts`` in the manifest's ``agent_view``) and rotates at most ten loading
messages (``assistant.threads.setStatus``): more is refused here, at start, rather than by
Slack on the first thread.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DEFAULT_PROMPTS", "AgentSurface", "SuggestedPrompt"]

MAX_PROMPTS = 4
MAX_LOADING_MESSAGES = 10


class SuggestedPrompt(BaseModel):
    """One prompt a person can click to send: its label, and the message it sends."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = Field(min_length=1, max_length=75)
    message: str = Field(min_length=1, max_length=2000)


DEFAULT_PROMPTS = (
    SuggestedPrompt(
        title="Summarize a channel", message="Summarize what happened in #general today."
    ),
    SuggestedPrompt(title="Catch me up", message="Read this thread and tell me what I missed."),
    SuggestedPrompt(
        title="Draft a post",
        message="Draft an announcement for #general, and ask me before posting it.",
    ),
    SuggestedPrompt(
        title="What can you do?",
        message="What can you do for me here, and what do you need me to approve?",
    ),
)


class AgentSurface(BaseModel):
    """The words of the app's agent surface (its Messages tab and assistant threads)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    greeting: str = Field(
        default="Hi! I can read channels, sum up threads and post for you once you approve.",
        min_length=1,
        max_length=300,
    )
    prompts: tuple[SuggestedPrompt, ...] = Field(default=DEFAULT_PROMPTS, max_length=MAX_PROMPTS)
    loading_messages: tuple[str, ...] = Field(
        default=(
            "is thinking…",
            "is reading the thread…",
            "is weighing what to say…",
            "is checking its notes…",
        ),
        min_length=1,
        max_length=MAX_LOADING_MESSAGES,
    )

    def prompt_payload(self) -> list[dict[str, str]]:
        """The prompts as Slack takes them."""
        return [{"title": p.title, "message": p.message} for p in self.prompts]
