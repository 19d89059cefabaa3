"""Benchmarks you can rerun: commands (``python -m bench.<name>``), not tests."""
