"""Model adapters: each vendor SDK is imported inside its own folder only."""
