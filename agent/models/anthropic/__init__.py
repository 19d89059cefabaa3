"""Claude through the official ``anthropic`` SDK.

Importing this package does not import the SDK: `settings` and `rules` are
pure; `_model` (the adapter) loads it, and `agent` imports that on first use.
"""
