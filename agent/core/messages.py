"""The transcript: what a session said and did, one message per row.

Roles are ``user`` (a person's opening message), ``trigger`` (the seed of a
turn nobody typed, attributed to what started it), ``assistant`` (a committed
model reply) and ``tool`` (the result of one tool call). The loop's position is
read off these messages, so they are the durable state of a turn.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal, overload

from pydantic import Field, TypeAdapter

from agent._json import JsonValue

__all__ = [
    "AssistantMessage",
    "Attachment",
    "AttachmentKind",
    "ContentBlock",
    "Message",
    "RedactedThinkingBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "ToolMessage",
    "TranscriptView",
    "TriggerMessage",
    "Usage",
    "UserMessage",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TextBlock:
    """Text the model wrote."""

    kind: Literal["text"] = "text"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingBlock:
    """Extended thinking, kept with its signature so it can be sent back verbatim."""

    kind: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RedactedThinkingBlock:
    """Thinking the provider encrypted; opaque, sent back as received."""

    kind: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """The model asked for one tool call."""

    kind: Literal["tool_call"] = "tool_call"
    id: str
    """Unique within the turn; keys the step `tool:<n>:<id>`."""
    name: str
    input: dict[str, JsonValue] = field(default_factory=dict)


ContentBlock = Annotated[
    TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolCall, Field(discriminator="kind")
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Tokens one model call used, as the provider counted them."""

    input_tokens: int = 0
    """Input tokens read neither from nor into the prompt cache."""
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_input_tokens=(
                self.cache_creation_input_tokens + other.cache_creation_input_tokens
            ),
        )


AttachmentKind = Literal["image", "document", "text", "unreadable"]
"""What a file became for the model: an image, a PDF, text, or a note that it could not be read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attachment:
    """A file a person attached to their message, as it was read when the turn was admitted.

    Its content is kept with the message (durably), so a replay, a restart or a
    later turn of the session sends the model the same bytes and never reads the
    file again. The channel that read it keeps it within the model's limits.
    """

    kind: AttachmentKind
    name: str
    """The file's name, as the person sees it."""
    media_type: str = ""
    """``image/png``, ``application/pdf``, ``text/plain``...; what the bytes are."""
    data: str = ""
    """The file's bytes in base64 (an image or a document); "" otherwise."""
    text: str = ""
    """The file's text (a text file); "" otherwise."""
    reason: str = ""
    """Why the file could not be read (an unreadable one): said to the model and the person."""

    @property
    def note(self) -> str:
        """What the model (and the person) is told of an unreadable file; "" for a read one."""
        if self.kind != "unreadable":
            return ""
        return f"(attached file {self.name} could not be read: {self.reason})"


@dataclass(frozen=True, slots=True, kw_only=True)
class UserMessage:
    """What a person sent: a turn's opening, or input that steered the running turn."""

    role: Literal["user"] = "user"
    turn_id: str
    text: str
    user: str | None = None
    """The speaker's id, when the channel knows it."""
    steer: str | None = None
    """The steer's id when this message steered turn ``turn_id`` after it opened."""
    files: tuple[Attachment, ...] = ()
    """The files attached to the message, read (or not) when it was admitted; sent to the
    model before its text. Transcripts stored before files existed read as none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerMessage:
    """The seed of a turn that no person sent (a schedule, a webhook)."""

    role: Literal["trigger"] = "trigger"
    turn_id: str
    text: str
    by: str
    """What started the turn, for example ``schedule:daily``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessage:
    """A committed model reply."""

    role: Literal["assistant"] = "assistant"
    turn_id: str
    content: tuple[ContentBlock, ...] = ()
    stop_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None
    """The model that wrote it: its thinking blocks are sent back to that model only."""
    prompt_digest: str | None = None
    """A digest of the request that produced it, as the model adapter computed it: a
    provider that ties thinking to its conversation refuses the blocks once it changed."""

    @property
    def text(self) -> str:
        """The reply's text blocks, joined."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls the reply asked for, in order."""
        return tuple(b for b in self.content if isinstance(b, ToolCall))

    def note_before(self, call_id: str) -> str:
        """What the model wrote just before asking for call ``call_id``, "" if nothing.

        Claude's newest models return the short note that introduces a tool call
        as a thinking block right before it: the progress to show while it runs.
        """
        previous: ContentBlock | None = None
        for block in self.content:
            if isinstance(block, ToolCall) and block.id == call_id:
                return previous.thinking if isinstance(previous, ThinkingBlock) else ""
            previous = block
        return ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolMessage:
    """The committed result of one tool call."""

    role: Literal["tool"] = "tool"
    turn_id: str
    call_id: str
    name: str
    result: JsonValue
    is_error: bool = False


Message = Annotated[
    UserMessage | TriggerMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]

MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
MESSAGES_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


class TranscriptView(Sequence[Message]):
    """A read-only window on a session's live transcript, shared without copying.

    Handing the model a copy would make every step cost O(history); a view keeps
    a step's cost flat however long the thread grows. It is valid for one call.
    Its indices count from its own first message: the ``head`` (a compacted
    session's summary), when there is one, then the live messages.
    """

    __slots__ = ("_head", "_messages")

    def __init__(self, messages: list[Message], head: Message | None = None) -> None:
        self._messages = messages
        self._head = head

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if self._head is None:
            return list.__getitem__(self._messages, index)  # the live messages, from 0
        if isinstance(index, slice):
            return list(self)[index]
        if index == 0 or index == -len(self):
            return self._head
        return list.__getitem__(self._messages, index - 1 if index > 0 else index)

    def __len__(self) -> int:
        return list.__len__(self._messages) + (self._head is not None)

    def __iter__(self) -> Iterator[Message]:
        if self._head is not None:
            yield self._head
        yield from list.__iter__(self._messages)
