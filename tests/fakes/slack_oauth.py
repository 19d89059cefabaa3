"""The fake Slack's side of OAuth: the approval page, and ``oauth.v2.access``.

Checked against docs.slack.dev/authentication/installing-with-oauth and
docs.slack.dev/reference/methods/oauth.v2.access (2026-12):

- ``GET /oauth/v2/authorize?client_id&scope&state&redirect_uri`` is where a person
  approves the app for their workspace; Slack then redirects the browser to the
  app's redirect URL with ``code`` and ``state`` (or ``error=access_denied``). Here
  ``team`` (which Slack also takes, to preselect a workspace) says whose approval it
  is, and the redirect is answered with a 302 the test follows.
- ``oauth.v2.access`` takes ``code``, ``client_id``, ``client_secret`` (form fields, or
  HTTP Basic auth) and ``redirect_uri`` if the authorize step had one; no bearer
  token. A code is good once (``invalid_code`` after), and for ten minutes;
  ``invalid_client_id``, ``bad_client_secret``, ``bad_redirect_uri`` otherwise. The
  answer carries ``access_token`` (the bot token), ``token_type: bot``, ``scope``,
  ``bot_user_id``, ``app_id``, ``team``, ``enterprise``, ``authed_user`` and
  ``is_enterprise_install``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from tests.fakes.slack_blocks import Refusal

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.fakes.slack_api import FakeSlack, Workspace, _Params

__all__ = ["OAuthApp"]

Json = dict[str, Any]


@dataclass
class _Grant:
    team_id: str
    user_id: str
    scope: str
    redirect_uri: str | None
    used: bool = False


@dataclass
class OAuthApp:
    """The app's OAuth credentials as Slack knows them, and the codes it handed out."""

    slack: FakeSlack
    client_id: str = "111.222"
    client_secret: str = "fake-client-secret"
    redirect_url: str | None = None
    """The app's redirect URL (its settings'); a test sets it to the bot's."""
    _grants: dict[str, _Grant] = field(default_factory=dict)
    exchanged: list[str] = field(default_factory=list)
    """The teams whose codes were traded for tokens, in order."""

    def methods(self) -> dict[str, Callable[[_Params], Json]]:
        return {"oauth.v2.access": self._access}

    def route(self, app: web.Application) -> None:
        app.router.add_get("/oauth/v2/authorize", self._authorize)

    def authorize_url(self) -> str:
        """What ``SLACK_AUTHORIZE_URL`` points at."""
        return self.slack.base_url.removesuffix("/api/") + "/oauth/v2/authorize"

    async def _authorize(self, request: web.Request) -> web.Response:
        query = request.query
        if query.get("client_id") != self.client_id:
            return web.Response(status=400, text="invalid_client_id")
        team = query.get("team") or self.slack.team_id
        if team != self.slack.team_id and team not in self.slack._workspaces:
            return web.Response(status=400, text="unknown workspace")
        redirect = query.get("redirect_uri") or self.redirect_url
        if redirect is None or (self.redirect_url and redirect != self.redirect_url):
            return web.Response(status=400, text="bad_redirect_uri")
        answer = {"state": query.get("state", "")}
        if query.get("deny"):  # the person pressed Cancel
            answer["error"] = "access_denied"
        else:
            code = secrets.token_hex(8)
            self._grants[code] = _Grant(
                team, self.slack.user_id, query.get("scope", ""), query.get("redirect_uri")
            )
            answer["code"] = code
        raise web.HTTPFound(f"{redirect}?{urlencode(answer)}")

    def _access(self, params: _Params) -> Json:
        if params.text("client_id") != self.client_id:
            raise Refusal("invalid_client_id")
        if params.text("client_secret") != self.client_secret:
            raise Refusal("bad_client_secret")
        grant = self._grants.get(params.text("code") or "")
        if grant is None or grant.used:
            raise Refusal("invalid_code")
        if grant.redirect_uri is not None and params.text("redirect_uri") != grant.redirect_uri:
            raise Refusal("bad_redirect_uri")
        grant.used = True
        self.exchanged.append(grant.team_id)
        workspace = self._workspace(grant.team_id)
        return {
            "access_token": workspace.token,
            "token_type": "bot",
            "scope": grant.scope,
            "bot_user_id": workspace.bot_user_id,
            "app_id": self.slack.app_id,
            "team": {"id": workspace.team_id, "name": workspace.name},
            "enterprise": None,
            "is_enterprise_install": False,
            "authed_user": {"id": grant.user_id},
        }

    def _workspace(self, team: str) -> Workspace:
        from tests.fakes.slack_api import Workspace

        if team in self.slack._workspaces:
            return self.slack._workspaces[team]
        slack = self.slack
        return Workspace(slack.team_id, slack.token, slack.bot_user_id, slack.bot_id, "Fake Team")
