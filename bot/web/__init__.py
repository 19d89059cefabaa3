"""The HTTP surface: a JSON and Server-Sent Events API over the engine, and the web console."""
