"""The Slack channel: signed Slack events in, turn events out as Slack messages."""
