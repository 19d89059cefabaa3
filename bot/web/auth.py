"""Who is asking: a bearer token's principal, or, with no tokens, the person at this machine.

With no tokens the API serves loopback only, and two more checks keep a web page
the person happens to visit from acting in their name: the Host header must name
this machine (a rebound DNS name does not), and a write must be sent as JSON,
which a page of another origin cannot send without a preflight we never grant.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from aiohttp import web

from bot.web.api.errors import ApiError

__all__ = ["LOCAL_PRINCIPAL", "ApiAuth"]

LOCAL_PRINCIPAL = "local"
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


class ApiAuth:
    """Maps a request to the principal it speaks for, or refuses it."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        """``tokens``: bearer token to principal id (API_TOKENS); empty for local mode."""
        self._tokens = [(token.encode(), principal) for token, principal in tokens.items()]

    @property
    def is_local(self) -> bool:
        """No tokens: the local user, on loopback only."""
        return not self._tokens

    def principal(self, request: web.Request) -> str:
        """The principal of ``request``, attested by its token (or by being local).

        Raises:
            ApiError: 401 with no or an unknown token; 403 for a local request that
                names another host or writes in something other than JSON.
        """
        if self.is_local:
            self._check_local(request)
            return LOCAL_PRINCIPAL
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(
                401, "unauthorized", "send Authorization: Bearer <token>, a token from API_TOKENS"
            )
        given = token.strip().encode()
        found = None
        for known, principal in self._tokens:  # every one compared, in constant time each
            if hmac.compare_digest(known, given):
                found = principal
        if found is None:
            raise ApiError(401, "unauthorized", "this token is not one of API_TOKENS")
        return found

    @staticmethod
    def _check_local(request: web.Request) -> None:
        host = request.url.host  # from the Host header, without its port
        if host not in LOOPBACK_NAMES:
            raise ApiError(
                403, "forbidden", "the local API answers requests to 127.0.0.1 or localhost only"
            )
        if request.method == "POST" and request.content_type != "application/json":
            raise ApiError(
                415,
                "unsupported_media_type",
                "send the body as JSON (Content-Type: application/json)",
            )
