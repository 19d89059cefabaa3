"""The Slack application on top of the `agent` engine (``bot -> agent``, never back)."""
