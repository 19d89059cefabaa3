"""The web console in real headless Chromium: send, watch the reply stream, approve, finish.

Chromium comes from the machine's packages (``.ci/run`` installs Debian's
``chromium``); Playwright drives it and never downloads a browser of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, async_playwright, expect

from agent import ModelRequest, TextDelta, ToolContext, ToolMessage, tool
from agent.core.model import ModelStreamEvent
from agent.errors import ModelError
from agent.testing import ScriptedModel, call, reply
from bot.offline import NOTING_NOTE, offline_model
from tests.bot.web_harness import serving

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # nothing but the console's own loopback server is looked up
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1, EXCLUDE localhost",
]
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "console.png"
WAIT_MS = 10_000


class HeldModel:
    """The offline model, holding its first reply after a few words until released."""

    def __init__(self) -> None:
        self.inner = offline_model()
        self.release = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        pieces = 0
        async for event in self.inner.stream(request):
            if isinstance(event, TextDelta):
                pieces += 1
                if pieces == 3:
                    await self.release.wait()  # the page shows what streamed so far
            yield event


def _check_chromium() -> None:
    assert Path(CHROMIUM).exists(), (
        "Chromium is needed: apt-get install -y chromium, or set CHROMIUM to its path"
    )


@pytest.fixture
async def page() -> AsyncIterator[Page]:
    _check_chromium()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            yield await context.new_page()
            await context.close()
        finally:
            await browser.close()


async def test_the_console_streams_a_reply_takes_an_approval_and_finishes(tmp_path, page):
    model = HeldModel()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    async with serving(tmp_path, model=model) as served:
        await page.goto(served.base_url + "/")
        await expect(page.locator("#model")).to_contain_text("Offline demo model", timeout=WAIT_MS)
        await page.click("#new-session")
        await page.fill("#composer", "share the launch is on Monday")
        await page.press("#composer", "Enter")

        streaming = page.locator(".msg.assistant").last
        await expect(streaming).to_have_text("(Offline dem", timeout=WAIT_MS)  # two pieces of six
        assert await page.evaluate("document.body.dataset.turn") == "running"
        model.release.set()

        approval = page.locator("#approval")
        await expect(approval).to_contain_text("Share this note?", timeout=WAIT_MS)
        await expect(page.locator("body")).to_have_attribute("data-turn", "waiting")
        await expect(page.locator("#composer")).to_be_disabled()
        await expect(page.locator(".tool-line").first).to_contain_text("remember")
        # what the model wrote before its tool call shows as a line of progress: streamed
        # live, then kept as the call's note, once, right before its tool line
        await expect(page.locator(".progress")).to_have_text([NOTING_NOTE])
        assert await page.evaluate(
            "document.querySelector('.progress').nextElementSibling.matches('.tool-line')"
        )
        # the card takes the focus, not Approve: a key typed as it appears decides nothing
        await expect(approval).to_be_focused()
        await page.keyboard.press("Enter")
        await page.keyboard.press(" ")
        await expect(page.locator("body")).to_have_attribute("data-turn", "waiting")
        await page.keyboard.press("Tab")
        await expect(page.locator('#approval button[data-answer="approve"]')).to_be_focused()
        waiting_shot = tmp_path / "console.png"  # the README's picture: a request waiting
        await page.screenshot(path=str(waiting_shot))
        await page.keyboard.press("Enter")

        await expect(page.locator("body")).to_have_attribute("data-turn", "idle", timeout=WAIT_MS)
        await expect(approval).to_have_count(0)
        await expect(page.locator(".msg.assistant").last).to_contain_text("Shared")
        await expect(page.locator("#sessions [data-session]").first).to_contain_text(
            "share the launch"
        )
        session = await served.runtime.session("bot", "http:" + await _selected(page)).turns()

    assert waiting_shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [t.status for t in session] == ["completed"]
    assert errors == []
    if os.environ.get("UPDATE_DOCS_SCREENSHOT"):
        DOCS_SCREENSHOT.write_bytes(waiting_shot.read_bytes())


async def _selected(page: Page) -> str:
    selected = page.locator('#sessions [data-session][aria-current="true"]')
    return str(await selected.get_attribute("data-session"))


async def test_cancel_and_reset_work_from_the_console(tmp_path, page):
    model = HeldModel()
    page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))  # Reset asks
    async with serving(tmp_path, model=model) as served:
        await page.goto(served.base_url + "/")
        await page.click("#new-session")
        await page.fill("#composer", "a long answer please")
        await page.press("#composer", "Enter")
        await expect(page.locator(".msg.assistant").last).to_have_text(
            "(Offline dem", timeout=WAIT_MS
        )
        await page.click("#cancel")
        await expect(page.locator("body")).to_have_attribute("data-turn", "idle", timeout=WAIT_MS)
        await expect(page.locator("#transcript")).to_contain_text("cancel")
        sid = await _selected(page)
        [cancelled] = await served.runtime.session("bot", "http:" + sid).turns()

        await page.click("#reset")
        await expect(page.locator("#transcript .msg")).to_have_count(0, timeout=WAIT_MS)
        reset_status = await served.runtime.session("bot", "http:" + sid).status()
        model.release.set()

    assert cancelled.status == "cancelled"
    assert reset_status == "new"


async def test_a_failed_turn_is_retried_from_the_console_and_its_answer_shows(tmp_path, page):
    def script(request: ModelRequest) -> Any:
        if not request.turn_id.endswith(".retry"):
            raise ModelError("the model is down", retryable=False)
        return reply(f"answered {request.messages[-1].text}")

    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    async with serving(tmp_path, model=ScriptedModel(script), tools=[]) as served:
        await page.goto(served.base_url + "/")
        await page.click("#new-session")
        await page.fill("#composer", "what is the plan")
        await page.press("#composer", "Enter")

        failed = page.locator(".note.error", has_text="Turn failed")
        await expect(failed).to_contain_text("the model is down", timeout=WAIT_MS)
        retry = failed.locator("button.retry")
        await retry.click()
        await expect(page.locator(".msg.assistant").last).to_have_text(
            "answered what is the plan", timeout=WAIT_MS
        )
        await expect(retry).to_have_text("Retried")
        await expect(retry).to_be_disabled()
        await expect(page.locator("body")).to_have_attribute("data-turn", "idle", timeout=WAIT_MS)
        sid = await _selected(page)
        turns = await served.runtime.session("bot", "http:" + sid).turns()

        # read again from the store: the failed turn is marked, and offers no second retry
        await page.reload()
        await page.locator(f'#sessions [data-session="{sid}"]').click()
        note = page.locator(".note.error", has_text="Turn failed")
        await expect(note).to_have_count(1, timeout=WAIT_MS)
        await expect(note.locator("button.retry")).to_have_count(0)

    assert [(t.status, t.retry_of) for t in turns] == [
        ("failed", None),
        ("completed", turns[0].turn_id),
    ]
    assert errors == []


async def test_a_tools_progress_shows_on_its_line_while_it_runs(tmp_path, page):
    go = asyncio.Event()

    @tool
    async def read_everything(ctx: ToolContext) -> str:
        """Read for a while, saying how far it got."""
        # Progress is live only: a page whose event stream connects after a line went out
        # never sees that line, so the tool says it again until it is let go, as a long
        # read would.
        while not go.is_set():
            ctx.progress("read 40 of 120 messages")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(go.wait(), 0.1)
        return "read it all"

    def script(request: ModelRequest) -> Any:
        if isinstance(request.messages[-1], ToolMessage):
            return reply("all read")
        return reply("", call("read_everything", id="c1"))

    async with serving(tmp_path, model=ScriptedModel(script), tools=[read_everything]) as served:
        await page.goto(served.base_url + "/")
        await page.click("#new-session")
        await page.fill("#composer", "read the channel")
        await page.press("#composer", "Enter")

        said = page.locator(".tool-line .said")
        await expect(said).to_have_text("read 40 of 120 messages", timeout=WAIT_MS)
        go.set()
        await expect(page.locator(".msg.assistant").last).to_have_text("all read", timeout=WAIT_MS)
        await expect(said).to_have_count(0)  # live only: gone once the call ended
        await expect(page.locator(".tool-line .res")).to_have_text("✓ done")


async def test_two_requests_of_one_step_are_answered_one_card_after_the_other(tmp_path, page):
    @tool
    async def share(note: str, ctx: ToolContext) -> dict[str, Any]:
        """Share a note once the person approves."""
        approved = await ctx.request_input(
            id="share", prompt=f"Share {note}?", schema={"type": "boolean"}
        )
        return {"shared": approved is True}

    def script(request: ModelRequest) -> Any:
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if results:
            return reply("; ".join(f"{m.result}" for m in results))
        return reply(
            "",
            call("share", {"note": "the plan"}, id="c1"),
            call("share", {"note": "the date"}, id="c2"),
        )

    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    async with serving(tmp_path, model=ScriptedModel(script), tools=[share]) as served:
        await page.goto(served.base_url + "/")
        await page.click("#new-session")
        await page.fill("#composer", "share both")
        await page.press("#composer", "Enter")

        approval = page.locator("#approval")
        await expect(approval).to_contain_text("Share the plan?", timeout=WAIT_MS)
        await page.click('#approval button[data-answer="approve"]')
        # the second call's card follows; the turn still waits for it
        await expect(approval).to_contain_text("Share the date?", timeout=WAIT_MS)
        await expect(page.locator("body")).to_have_attribute("data-turn", "waiting")
        await page.click('#approval button[data-answer="deny"]')
        await expect(page.locator(".msg.assistant").last).to_have_text(
            "{'shared': True}; {'shared': False}", timeout=WAIT_MS
        )
        await expect(approval).to_have_count(0)

    assert errors == []
