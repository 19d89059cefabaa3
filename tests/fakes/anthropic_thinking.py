"""Thinking blocks the fake sent, and what becomes of them when a request sends them back.

The real API signs each thinking block. The signature ties it to the model
that wrote it and, on the conversation-bound models, to the conversation
before it. The fake cannot sign, so it remembers every block it sent
(``ThinkingLedger.issue``) and judges a block sent back against that record
(``ThinkingLedger.screen``):

* a signature (or redacted ``data``) it never sent: a 400;
* a block made by a model the requested one cannot read: dropped, and the
  request goes on without it (``model_binding_mismatch``);
* a block whose text was changed: a 400. A block sent with an empty text
  (display "omitted") takes any text back, since "any text you place in the
  thinking field of a round-tripped omitted block is ignored";
* a block from a conversation-bound model whose conversation before it
  (system, tools, earlier messages) changed: a 400, or, with
  ``block_binding.prefix_mismatch_behavior: "drop_block"``, dropped with the
  rest of its run of thinking blocks (``prefix_binding_mismatch``).

Tests reuse signatures, so one signature may have been sent several times: a
block passes if any of those sendings fits.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from tests.fakes.anthropic_models import ModelRules
from tests.fakes.anthropic_rules import Refused

__all__ = ["Screening", "ThinkingLedger", "displayed"]

Json: TypeAlias = dict[str, Any]

_THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
_TOOL_CALLS = frozenset({"tool_use", "server_tool_use"})

MODIFIED = (
    "`thinking` or `redacted_thinking` blocks in the latest assistant message cannot be "
    "modified. These blocks must remain as they were in the original response."
)
OTHER_CONVERSATION = (
    "The block is bound to a different conversation. Remove the block, or set "
    '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
)


def _type(block: Any) -> str:
    return str(block.get("type")) if isinstance(block, dict) else ""


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _key(block: Json) -> Any:
    """What identifies a block the fake sent: its signature, or a redacted block's data."""
    return block.get("signature") if _type(block) == "thinking" else block.get("data")


def _normal(block: Any) -> Any:
    """A block as the conversation check sees it: no cache_control; thinking by its key.

    An omitted block's text is ignored when it comes back, so it cannot count.
    """
    if not isinstance(block, dict):
        return block
    if _type(block) in _THINKING_TYPES:
        return {"type": block["type"], "key": _key(block)}
    return {k: v for k, v in block.items() if k != "cache_control"}


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


class _PrefixDigests:
    """Digests of system + tools + the first ``n`` messages, hashed once, in order.

    ``messages`` is the request as the model sees it; the screen fills in each
    message (its drops made) before it asks for a digest past it.
    """

    def __init__(self, body: Json, messages: list[Any]) -> None:
        self._body = body
        self._messages = messages
        self._hash: Any = None
        self._done = 0

    def at(self, count: int) -> str:
        if self._hash is None:
            self._hash = hashlib.sha256()
            system = [_normal(b) for b in _blocks(self._body.get("system"))]
            tools = _without_cache_control(self._body.get("tools") or [])
            self._update(["system", system, "tools", tools])
        while self._done < count:
            message = self._messages[self._done]
            self._update([message.get("role"), [_normal(b) for b in _blocks(message["content"])]])
            self._done += 1
        return str(self._hash.copy().hexdigest())

    def _update(self, value: Any) -> None:
        self._hash.update(json.dumps(value, sort_keys=True, separators=(",", ":")).encode())
        self._hash.update(b"\n")


@dataclass(frozen=True, slots=True)
class _Issue:
    text: str | None
    """What was sent in ``thinking``; None for a redacted block."""
    model: str
    bound: bool
    prefix: str


@dataclass
class Screening:
    """A request after its thinking blocks were judged."""

    body: Json
    """The request as the model sees it: the same object when nothing was dropped."""
    dropped: list[dict[str, str]] = field(default_factory=list)
    _digests: _PrefixDigests | None = None

    def prefix(self) -> str:
        """The digest a reply's thinking blocks are bound to: this whole request."""
        if self._digests is None:
            self._digests = _PrefixDigests(self.body, self.body["messages"])
        return self._digests.at(len(self.body["messages"]))


class ThinkingLedger:
    """Every thinking block the fake sent, by signature (or redacted data)."""

    def __init__(self) -> None:
        self._issued: dict[str, list[_Issue]] = {}

    def issue(self, blocks: list[Json], model: ModelRules, prefix: str) -> None:
        """Remember blocks as they were sent, in answer to a request whose prefix is given."""
        for block in blocks:
            key = _key(block)
            if isinstance(key, str):
                text = block.get("thinking") if _type(block) == "thinking" else None
                issue = _Issue(text, model.id, model.conversation_bound, prefix)
                self._issued.setdefault(key, []).append(issue)

    def screen(self, body: Json, model: ModelRules, *, drop_prefix_mismatch: bool) -> Screening:
        """Judge every thinking block of the request's assistant messages, for ``model``.

        Raises:
            Refused: A block the fake never sent, one that was changed, or one
                bound to another conversation.
        """
        messages = body["messages"]
        if not any(_carries_thinking(m) for m in messages):
            return Screening(body)
        seen = list(messages)
        digests = _PrefixDigests(body, seen)
        latest = max(i for i, m in enumerate(messages) if m.get("role") == "assistant")
        dropped: list[dict[str, str]] = []
        for index, message in enumerate(messages):
            if not _carries_thinking(message):
                continue
            judge = _Judge(self._issued, model, digests, index, latest=index == latest)
            drops = judge.message(message["content"], drop_prefix_mismatch)
            if drops:
                kept = [b for j, b in enumerate(message["content"]) if j not in drops]
                seen[index] = {**message, "content": kept}
                dropped += [
                    {"path": f"messages.{index}.content.{j}", "reason": drops[j]}
                    for j in sorted(drops)
                ]
        if not dropped:
            return Screening(body, _digests=digests)
        return Screening({**body, "messages": seen}, dropped, digests)


def _carries_thinking(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return (
        message.get("role") == "assistant"
        and isinstance(content, list)
        and any(_type(b) in _THINKING_TYPES for b in content)
    )


@dataclass
class _Judge:
    """The verdicts on one assistant message's thinking blocks."""

    issued: dict[str, list[_Issue]]
    model: ModelRules
    digests: _PrefixDigests
    index: int
    latest: bool

    def message(self, blocks: list[Any], drop_prefix_mismatch: bool) -> dict[int, str]:
        """Which blocks to drop, and why; raises for a block the API refuses."""
        drops: dict[int, str] = {}
        for position, block in enumerate(blocks):
            if _type(block) in _THINKING_TYPES:
                reason = self._block(position, block, drop_prefix_mismatch)
                if reason is not None:
                    drops[position] = reason
        for position, reason in list(drops.items()):
            if reason == "prefix_binding_mismatch":
                # "the rest of that turn's consecutive thinking blocks are removed with it"
                for other in _run(blocks, position):
                    drops.setdefault(other, reason)
        return drops

    def _block(self, position: int, block: Json, drop_prefix_mismatch: bool) -> str | None:
        where = f"messages.{self.index}.content.{position}"
        key = _key(block)
        issues = self.issued.get(key) if isinstance(key, str) else None
        if not issues:
            raise Refused(_invalid(where, block))
        readable = [i for i in issues if self.model.reads(i.model)]
        if not readable:
            return "model_binding_mismatch"
        intact = [i for i in readable if not i.text or i.text == block.get("thinking")]
        if not intact:
            # The errors page words it for the latest assistant message; a block
            # changed further back is taken as one whose signature no longer fits
            # (not documented).
            raise Refused(f"{where}: {MODIFIED}" if self.latest else _invalid(where, block))
        if any(not i.bound or i.prefix == self.digests.at(self.index) for i in intact):
            return None
        if drop_prefix_mismatch:
            return "prefix_binding_mismatch"
        raise Refused(f"{_invalid(where, block)}. {OTHER_CONVERSATION}")


def _invalid(where: str, block: Json) -> str:
    if _type(block) == "thinking":
        return f"{where}: Invalid `signature` in `thinking` block"
    # not documented for redacted blocks: worded as the thinking block's
    return f"{where}: Invalid `data` in `redacted_thinking` block"


def _run(blocks: list[Any], position: int) -> range:
    """The consecutive thinking blocks around ``position``."""
    start = end = position
    while start > 0 and _type(blocks[start - 1]) in _THINKING_TYPES:
        start -= 1
    while end + 1 < len(blocks) and _type(blocks[end + 1]) in _THINKING_TYPES:
        end += 1
    return range(start, end + 1)


def displayed(content: list[Json], display: str) -> list[Json]:
    """A reply's blocks as the request's ``display`` sends them.

    "omitted" empties every thinking block's text, keeping its signature;
    "updates" keeps the text only of progress notes, taken to be the thinking
    blocks directly before a tool call (where the API puts them).
    """
    if display == "summarized" or not any(_type(b) == "thinking" for b in content):
        return content
    shown = []
    for position, block in enumerate(content):
        if _type(block) == "thinking" and block.get("thinking"):
            following = content[position + 1] if position + 1 < len(content) else None
            if display == "omitted" or _type(following) not in _TOOL_CALLS:
                block = {**block, "thinking": ""}
        shown.append(block)
    return shown
