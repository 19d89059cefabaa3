"""People and channels by name: what the model reads, and what it may write back.

Slack writes ids (``<@U0ANA>``, ``<#C0GENERAL>``); a model reads names better
and asks for channels by name (``#general``). Names are asked of Slack once per
process and kept; a name Slack does not know is an error the model can act on.
"""

from __future__ import annotations

import re

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import ToolError

__all__ = ["SlackNames"]

_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
_CHANNEL_MENTION = re.compile(r"<#([CG][A-Z0-9]+)(?:\|([^>]*))?>")
_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{6,}")
LIST_PAGE = 200


class SlackNames:
    """Names of users and public channels, by id and back, asked of Slack once."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        """Whose names these are: the bot's client in one workspace."""
        self._users: dict[str, str] = {}
        self._channels: dict[str, str] = {}
        """Channel names by id."""
        self._listed = False
        self._workspace: str | None = None
        """``https://<workspace>.slack.com/``, from ``auth.test``; empty when unknown."""

    async def user(self, user: str | None) -> str:
        """``@ana (U0ANA)``: the name to read, and the id to mention them with."""
        if not user:
            return "someone"
        if user not in self._users:
            try:
                info = (await self.client.users_info(user=user))["user"]
                self._users[user] = str(info.get("name") or user)
            except SlackApiError:
                self._users[user] = user
        return f"@{self._users[user]} ({user})"

    async def channel_id(self, ref: str) -> str:
        """The id of a channel given as ``C0…``, ``<#C0…|name>``, ``#name`` or ``name``.

        Raises:
            ToolError: No public channel has that name.
        """
        text = ref.strip()
        mention = _CHANNEL_MENTION.fullmatch(text)
        if mention:
            return mention.group(1)
        if _CHANNEL_ID.fullmatch(text):
            return text
        name = text.removeprefix("#").lower()
        found = self._named(name) if self._listed else None
        if found is None:  # not known yet: ask again (a channel made or renamed since)
            await self._list_channels()
            found = self._named(name)
        if found is None:
            raise ToolError(f"no public channel is named #{name}")
        return found

    def _named(self, name: str) -> str | None:
        return next((cid for cid, known in self._channels.items() if known.lower() == name), None)

    def learn_channel(self, channel_id: str, name: object) -> None:
        """Keep a channel's name Slack already told (no need to ask it again)."""
        if isinstance(name, str) and name:
            self._channels[channel_id] = name

    async def channel(self, channel_id: str) -> str:
        """``#general``, or the id when Slack will not say."""
        if channel_id not in self._channels:
            try:
                info = (await self.client.conversations_info(channel=channel_id))["channel"]
            except SlackApiError:
                return channel_id
            self._channels[channel_id] = str(info.get("name") or channel_id)
        return f"#{self._channels[channel_id]}"

    async def link(self, channel_id: str, ts: str) -> str | None:
        """The message's address in the workspace (a permalink), when Slack names the workspace."""
        if self._workspace is None:
            try:
                self._workspace = str((await self.client.auth_test()).get("url") or "")
            except SlackApiError:
                self._workspace = ""
        if not self._workspace:
            return None
        return f"{self._workspace.rstrip('/')}/archives/{channel_id}/p{ts.replace('.', '')}"

    async def readable(self, text: str) -> str:
        """``text`` with user and channel mentions shown by name (and the user's id)."""
        users = {u: await self.user(u) for u in _USER_MENTION.findall(text)}
        channels = {c: await self.channel(c) for c, _ in _CHANNEL_MENTION.findall(text)}
        text = _USER_MENTION.sub(lambda m: users[m.group(1)], text)
        return _CHANNEL_MENTION.sub(lambda m: channels[m.group(1)], text)

    async def _list_channels(self) -> None:
        """Every public channel's name (``conversations.list``, paged)."""
        cursor: str | None = None
        try:
            while True:
                page = await self.client.conversations_list(
                    types="public_channel", exclude_archived=True, limit=LIST_PAGE, cursor=cursor
                )
                for channel in page["channels"]:
                    self._channels[str(channel["id"])] = str(channel.get("name", ""))
                cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
                if cursor is None:
                    break
        except SlackApiError as exc:
            raise ToolError(f"cannot list channels: {exc.response.get('error')}") from None
        self._listed = True
