"""The engine: runs turns of sessions against the seams in `agent.ports`."""
