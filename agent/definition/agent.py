"""What an agent is: a name, a model, instructions and tools."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from agent.core.hitl import AuthorizeAnswer
from agent.core.model import ToolSpec
from agent.core.policy import SurfacePolicy
from agent.definition.compacting import Compacting
from agent.definition.output import OUTPUT_TOOL, output_tool
from agent.definition.tools import Tool
from agent.errors import ConfigError
from agent.ports import Model

__all__ = ["Agent", "RetryPolicy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often a model step that failed for a passing reason is asked again.

    It covers what the provider's client cannot retry itself: a stream that
    broke mid-reply, an error sent inside the stream, a client whose own
    retries ran out. Nothing of a failed attempt is committed.
    """

    attempts: int = 3
    """Tries per model step, the first included."""
    first_delay: float = 1.0
    """Seconds before the second try; doubled for each further one."""
    max_delay: float = 30.0
    """The longest wait between tries, whatever the provider asks."""

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed try number ``attempt`` (from 1)."""
        wanted = retry_after if retry_after is not None else self.first_delay * 2 ** (attempt - 1)
        return max(0.0, min(wanted, self.max_delay))


@dataclass(frozen=True, kw_only=True)
class Agent:
    """An agent definition; the runtime runs its turns.

    Raises:
        ConfigError: No name, or two tools share a name.
    """

    name: str
    model: Model
    instructions: str = ""
    tools: Sequence[Tool] = ()
    model_retry: RetryPolicy = RetryPolicy()
    authorize_answer: AuthorizeAnswer | None = None
    """Decides, at resume time, whether a resumer may answer a ``{policy, scope}`` request."""
    max_turn_seconds: float | None = None
    """How long one run of a turn may take; past it the turn ends interrupted with reason
    ``timeout`` at its next checkpoint boundary (a streaming reply is abandoned at once,
    a running remote tool gets ``tool_cancel_grace`` to finish, then is cancelled). Time
    spent suspended, waiting for a person, does not count."""
    tool_cancel_grace: float = 5.0
    """Seconds a remote tool still running when its turn is cancelled (a cancel, a
    replace, a reset, the time limit) may take to finish; then its task is cancelled
    and the call's result says so, so no turn waits forever on a tool."""
    max_parallel_calls: int = 8
    """Calls of one model reply that run at once; the rest wait for a slot, in call order
    (so 1 runs them one after another, and one that asks a person holds the rest until it
    is answered). Local calls take their transactions one at a time whatever this says;
    results reach the transcript in call order."""
    max_delegation_depth: int = 3
    """How deep a chain of delegations (`ToolContext.delegate`) may go from this agent's
    turns: a child turn is one deep, its own child two. A call past it fails, and the
    model reads why; 0 lets this agent delegate nothing."""
    on_lost: Literal["resume", "interrupt"] = "resume"
    """What becomes of a turn whose process was lost while it ran (a crash, a host gone):
    ``resume`` runs it on from its last checkpoint, never repeating a committed step;
    ``interrupt`` ends it interrupted (reason ``lost``), for an agent whose tools must
    not be picked up half-way. A clean stop (a deploy's SIGTERM) is no loss: its turns
    resume either way."""
    surfaces: Mapping[str, SurfacePolicy] = field(default_factory=dict)
    """The policy of each source (``slack``...): its denied tools and how its
    instructions combine with the base ones."""
    overlays: Mapping[str, str] = field(default_factory=dict)
    """Instructions per source (from ``instructions.<source>.md``), laid over the base
    ones as the source's policy says."""
    output_type: type[BaseModel] | None = None
    """A turn's machine result, beside the reply: the model gives it through the
    ``final_result`` tool and the turn completes with it validated (``Completed.output``)."""
    output_retries: int = 2
    """How often the model is asked again when its result is missing or does not
    validate; past that the turn fails (phase ``output``)."""
    compacting: Compacting | None = None
    """Summarise a long session's oldest turns, so its memory and requests stay flat
    (see `Compacting`); None keeps every turn live."""
    history_retention: float | None = None
    """Seconds an ended turn's input, messages and result are kept; then they are deleted
    and its identity, status, timestamps and usage stay (None: kept for good)."""
    tools_by_name: Mapping[str, Tool] = field(init=False, repr=False)
    tool_specs: tuple[ToolSpec, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("an agent needs a name")
        if self.max_turn_seconds is not None and not self.max_turn_seconds > 0:
            raise ConfigError(f"agent {self.name}: max_turn_seconds must be above 0")
        if self.on_lost not in ("resume", "interrupt"):
            raise ConfigError(
                f"agent {self.name}: on_lost must be 'resume' or 'interrupt', not {self.on_lost!r}"
            )
        if self.max_parallel_calls < 1:
            raise ConfigError(f"agent {self.name}: max_parallel_calls must be 1 or more")
        if self.max_delegation_depth < 0:
            raise ConfigError(f"agent {self.name}: max_delegation_depth must be 0 or more")
        if not self.tool_cancel_grace >= 0:
            raise ConfigError(f"agent {self.name}: tool_cancel_grace must be 0 or more")
        if self.history_retention is not None and not self.history_retention > 0:
            raise ConfigError(f"agent {self.name}: history_retention must be above 0 seconds")
        if self.output_retries < 0:
            raise ConfigError(f"agent {self.name}: output_retries must be 0 or more")
        tools = list(self.tools)
        if self.output_type is not None:
            tools.append(output_tool(self.output_type, agent=self.name))
        by_name: dict[str, Tool] = {}
        for t in tools:
            if t.name in by_name:
                raise ConfigError(f"agent {self.name}: two tools are named {t.name!r}")
            by_name[t.name] = t
        object.__setattr__(self, "tools_by_name", by_name)
        # built once: schemas are derived by pydantic and would cost every step
        object.__setattr__(self, "tool_specs", tuple(t.spec for t in tools))
        for source, surface in self.surfaces.items():
            self.check_surface(f"surface {source!r}", surface)
            if "mode" in surface.model_fields_set and self.source_instructions(source) is None:
                raise ConfigError(
                    f"agent {self.name}: surface {source!r} sets mode {surface.mode!r} but "
                    f"there are no instructions for it (instructions.{source}.md)"
                )

    def source_instructions(self, source: str) -> str | None:
        """The instructions a source's turns lay over (or put in place of) the base ones.

        A policy's own instructions come before the folder's ``instructions.<source>.md``:
        the operator who wrote them there meant them.
        """
        surface = self.surfaces.get(source)
        if surface is not None and surface.instructions is not None:
            return surface.instructions
        return self.overlays.get(source)

    def check_surface(self, where: str, surface: SurfacePolicy) -> None:
        """Refuse a policy that names a tool this agent does not have.

        Raises:
            ConfigError: Naming ``where`` and the tool.
        """
        if self.output_type is not None and OUTPUT_TOOL in surface.deny_tools:
            raise ConfigError(
                f"agent {self.name}: {where}: deny_tools names {OUTPUT_TOOL}, the tool through "
                "which this agent's turns give their result; it cannot be denied"
            )
        for field_name in ("deny_tools", "allow_tools"):
            unknown = sorted(set(getattr(surface, field_name)) - set(self.tools_by_name))
            if unknown:
                raise ConfigError(
                    f"agent {self.name}: {where}: {field_name} names no tool of this agent: "
                    f"{', '.join(unknown)} (it has: {', '.join(sorted(self.tools_by_name))})"
                )

    @classmethod
    def from_folder(cls, folder: str | Path, *, name: str, model: Model, **rest: Any) -> Agent:
        """The agent whose instructions live in ``folder``.

        ``instructions.md`` holds the base instructions and ``instructions.<source>.md``
        the overlay of each source (``instructions.slack.md``); ``rest`` is the
        other fields (tools, surfaces...).

        Raises:
            ConfigError: The folder has no ``instructions.md``, or a surface's mode
                has no instructions to go with it.
        """
        root = Path(folder)
        base = root / "instructions.md"
        if not base.is_file():
            raise ConfigError(f"agent {name}: {base} is missing (the base instructions)")
        overlays = {
            path.name.removeprefix("instructions.").removesuffix(".md"): path.read_text().strip()
            for path in sorted(root.glob("instructions.*.md"))
        }
        return cls(
            name=name,
            model=model,
            instructions=base.read_text().strip(),
            overlays=overlays,
            **rest,
        )
