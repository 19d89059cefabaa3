"""The HTTP API under ``/api``, by concern.

`routes` has the handlers, `payloads` the bodies and answers, `streams` the
event streams, `errors` the JSON error shape, and `surface` what the API serves.
"""
