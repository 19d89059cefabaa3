"""The web console in real headless Chromium: send, watch the reply stream, approve, finish.

Chromium comes from the machine's packages (``.ci/run`` installs Debian's
``chromium``); Playwright drives it and never downloads a browser of its own.
With ``UPDATE_DOCS_SCREENSHOT`` set, the tests renew the pictures in ``docs/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from agent import ModelRequest, TextDelta, ToolContext, ToolMessage, tool
from agent.core.model import ModelStreamEvent
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
DOCS = Path(__file__).resolve().parents[2] / "docs"
WAIT_MS = 10_000
PHONE = {"width": 390, "height": 844}
# every CSP violation the page meets, as the page sees it (an init script runs before any other)
WATCH_CSP = """
window.__csp = [];
document.addEventListener('securitypolicyviolation',
  (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
"""


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
async def browser() -> AsyncIterator[Browser]:
    _check_chromium()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    yield await context.new_page()
    await context.close()


@dataclass
class Watched:
    """What a page did that it should not: errors thrown, policy violations, browser dialogs."""

    page: Page
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    async def violations(self) -> list[str]:
        return list(await self.page.evaluate("window.__csp"))

    async def assert_clean(self) -> None:
        assert self.errors == []
        assert self.dialogs == []
        assert await self.violations() == []


async def _watch(page: Page) -> Watched:
    watched = Watched(page)
    page.on("pageerror", lambda error: watched.errors.append(str(error)))

    def on_dialog(dialog: Any) -> None:
        watched.dialogs.append(f"{dialog.type}: {dialog.message}")
        asyncio.ensure_future(dialog.dismiss())  # noqa: RUF006 - the page must not hang on it

    page.on("dialog", on_dialog)
    await page.add_init_script(WATCH_CSP)
    return watched


async def _shoot(page: Page, folder: Path, name: str) -> None:
    """A screenshot of the page, renewed in ``docs/`` when ``UPDATE_DOCS_SCREENSHOT`` is set."""
    shot = folder / name
    await page.screenshot(path=str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("UPDATE_DOCS_SCREENSHOT"):
        (DOCS / name).write_bytes(shot.read_bytes())


async def _eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(100):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not so within 5 s: {what}")


async def _send(page: Page, text: str) -> None:
    await page.fill("#composer", text)
    await page.press("#composer", "Enter")


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
        await _shoot(page, tmp_path, "console.png")  # the README's picture: a request waiting
        await page.keyboard.press("Enter")

        await expect(page.locator("body")).to_have_attribute("data-turn", "idle", timeout=WAIT_MS)
        await expect(approval).to_have_count(0)
        await expect(page.locator(".msg.assistant").last).to_contain_text("Shared")
        await expect(page.locator("#sessions [data-session]").first).to_contain_text(
            "share the launch"
        )
        session = await served.runtime.session("bot", "http:" + await _selected(page)).turns()

    assert [t.status for t in session] == ["completed"]
    assert errors == []


async def _selected(page: Page) -> str:
    selected = page.locator('#sessions [data-session][aria-current="true"]')
    return str(await selected.get_attribute("data-session"))


async def test_cancel_and_reset_work_from_the_console(tmp_path, page):
    model = HeldModel()
    watched = await _watch(page)
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

        # Reset asks in the page, not in a browser dialog; keeping the session changes nothing
        confirm = page.locator("#confirm")
        shown = await page.locator("#transcript .msg").count()
        await page.click("#reset")
        await expect(confirm).to_be_visible()
        await expect(confirm).to_contain_text(f"Session {sid} starts over")
        await expect(confirm.locator('button[value="cancel"]')).to_be_focused()
        await _shoot(page, tmp_path, "console-reset.png")
        await confirm.locator('button[value="cancel"]').click()
        await expect(confirm).to_be_hidden()
        await expect(page.locator("#transcript .msg")).to_have_count(shown)
        kept_status = await served.runtime.session("bot", "http:" + sid).status()

        await page.click("#reset")
        await confirm.locator('button[value="ok"]').click()
        await expect(confirm).to_be_hidden()
        await expect(page.locator("#transcript .msg")).to_have_count(0, timeout=WAIT_MS)
        reset_status = await served.runtime.session("bot", "http:" + sid).status()
        model.release.set()
        await watched.assert_clean()  # no window.confirm: no browser dialog came up

    assert cancelled.status == "cancelled"
    assert kept_status != "new"
    assert reset_status == "new"


# how the console words a turn's error: no class name reaches the person
FAILURES = [
    (("the model is down", "model"), "The model could not answer: the model is down."),
    (("TimeoutError", "tool"), "A tool this reply used failed: it took too long."),
    (
        ("KeyError: 'x'", None),
        "This reply could not be finished: something went wrong inside the agent ('x').",
    ),
    (
        ("ValueError", "output"),
        "The answer did not come out in the form asked for: something went wrong inside the agent.",
    ),
    (
        ("the reply stream broke: ReadError", "model"),
        "The model could not answer: the reply stream broke.",
    ),
    (
        ("httpx.ConnectError: [Errno 111] refused", "model"),
        "The model could not answer: the service could not be reached (refused).",
    ),
]


async def test_a_failed_turn_says_why_in_words_and_is_retried_from_the_console(tmp_path, page):
    def script(request: ModelRequest) -> Any:
        if not request.turn_id.endswith(".retry"):
            raise ConnectionResetError(104, "Connection reset by peer")
        return reply(f"answered {request.messages[-1].text}")

    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    async with serving(tmp_path, model=ScriptedModel(script), tools=[]) as served:
        await page.goto(served.base_url + "/")
        await page.click("#new-session")
        await page.fill("#composer", "what is the plan")
        await page.press("#composer", "Enter")

        failed = page.locator(".note.error", has_text="could not answer")
        retry = failed.locator("button.retry")
        # the reason in words, never the class name, the question kept, and Retry beside it
        said = "The model could not answer: the connection was cut off (Connection reset by peer)."
        await expect(failed).to_have_text(said + "Retry", timeout=WAIT_MS)
        await expect(page.locator(".msg.user")).to_have_text(["what is the plan"])
        await _shoot(page, tmp_path, "console-failed.png")
        worded = await page.evaluate(
            "(cases) => cases.map(([error, phase]) => failureText(error, phase))",
            [list(case) for case, _ in FAILURES],
        )
        assert worded == [words for _, words in FAILURES]
        await retry.click()
        await expect(page.locator(".msg.assistant").last).to_have_text(
            "answered what is the plan", timeout=WAIT_MS
        )
        await expect(retry).to_have_text("Retried")
        await expect(retry).to_be_disabled()
        await expect(page.locator("body")).to_have_attribute("data-turn", "idle", timeout=WAIT_MS)
        sid = await _selected(page)
        turns = await served.runtime.session("bot", "http:" + sid).turns()

        # read again from the store: the failed turn still says why, and offers no second retry
        await page.reload()
        await page.locator(f'#sessions [data-session="{sid}"]').click()
        note = page.locator(".note.error", has_text="could not answer")
        await expect(note).to_have_count(1, timeout=WAIT_MS)
        await expect(note).to_have_text(said)
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


MARKDOWN_REPLY = """Here is the **plan**:

- draft the note
- share it on Monday

| Step | Owner |
| --- | --- |
| Draft | Ana |
| Share | Bob |

```python
print("launch")
```

Read [the guide](https://example.com/guide), not [this one](javascript:alert(1))."""

UNSAFE_REPLY = """Careful: <img src=x onerror="window.pwned = 'img'"> and
<script>window.pwned = 'script'</script>

<iframe src="https://example.com/"></iframe>

<a href="https://example.com/" onclick="window.pwned = 'a'">a raw link</a>
[a script link](javascript:window.pwned='href') ![a picture](https://example.com/p.png)"""


def _answers(text: str) -> ScriptedModel:
    return ScriptedModel(lambda request: reply(text))


async def test_a_reply_shows_as_markdown_and_its_code_copies(tmp_path, browser):
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await context.new_page()
    watched = await _watch(page)
    async with serving(tmp_path, model=_answers(MARKDOWN_REPLY), tools=[]) as served:
        await context.grant_permissions(["clipboard-read", "clipboard-write"])
        await page.goto(served.base_url + "/")
        await _send(page, "the plan as a list, a table and code")

        answer = page.locator(".msg.assistant").last
        await expect(answer.locator("li")).to_have_text(["draft the note", "share it on Monday"])
        await expect(answer.locator("strong")).to_have_text("plan")
        await expect(answer.locator("table th")).to_have_text(["Step", "Owner"])
        await expect(answer.locator("table tbody tr")).to_have_count(2)
        await expect(answer.locator("table tbody td").first).to_have_text("Draft")
        await expect(answer.locator(".code-block pre")).to_have_text('print("launch")')
        # one link: the javascript: one stays its words, with no address
        links = answer.locator("a")
        await expect(links).to_have_count(1)
        await expect(links).to_have_attribute("href", "https://example.com/guide")
        await expect(links).to_have_attribute("rel", "noopener noreferrer")
        await expect(links).to_have_attribute("target", "_blank")
        await expect(answer).to_contain_text("not this one.")
        await _shoot(page, tmp_path, "console-markdown.png")

        copy = answer.locator(".code-block button.copy")
        await copy.click()
        await expect(copy).to_have_text("Copied")
        assert await page.evaluate("navigator.clipboard.readText()") == 'print("launch")'
        await expect(copy).to_have_text("Copy", timeout=WAIT_MS)
        await watched.assert_clean()
    await context.close()


async def test_html_in_a_reply_shows_as_text_and_never_runs(tmp_path, page):
    watched = await _watch(page)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    async with serving(tmp_path, model=_answers(UNSAFE_REPLY), tools=[]) as served:
        await page.goto(served.base_url + "/")
        await _send(page, "some HTML please")

        answer = page.locator(".msg.assistant").last
        await expect(answer).to_contain_text("a script link", timeout=WAIT_MS)
        # the model's HTML is words on the page: no element of it, no handler, nothing loaded
        await expect(answer).to_contain_text("<img src=x onerror=\"window.pwned = 'img'\">")
        await expect(answer).to_contain_text("<script>window.pwned = 'script'</script>")
        for tag in ("img", "script", "iframe", "[onerror]", "[onclick]", "[style]"):
            await expect(answer.locator(tag)).to_have_count(0)
        await expect(answer.locator("a")).to_have_count(1)  # the picture, as a link to it
        await expect(answer.locator("a")).to_have_attribute("href", "https://example.com/p.png")
        await answer.locator("a").click(modifiers=["Shift"], no_wait_after=True)
        assert await page.evaluate("window.pwned") is None
        await watched.assert_clean()  # the policy never had to stop anything either

    assert [url for url in asked if not url.startswith(served.base_url)] == []


async def test_an_approval_card_leaves_the_text_it_asks_about_in_view(tmp_path, page):
    def script(request: ModelRequest) -> Any:
        if isinstance(request.messages[-1], ToolMessage):
            return reply("Shared.")
        if request.messages[-1].text.startswith("share"):
            return reply("I will share this note:\n\n> the launch is on Monday", call("share_it"))
        return reply("\n".join(f"- point {i} of a long answer" for i in range(40)))

    watched = await _watch(page)
    async with serving(tmp_path, model=ScriptedModel(script), tools=[share_it]) as served:
        await page.goto(served.base_url + "/")
        await _send(page, "a long answer")
        await expect(page.locator(".msg.assistant li")).to_have_count(40, timeout=WAIT_MS)
        await _send(page, "share the note")
        card = page.locator("#approval")
        await expect(card).to_contain_text("Share it?", timeout=WAIT_MS)

        async def in_view() -> bool:
            view = await page.locator("#transcript").bounding_box()
            box = await card.bounding_box()
            asked = await page.locator(".msg.assistant").last.bounding_box()
            line = await page.locator(".tool-line").last.bounding_box()
            assert view
            assert box
            assert asked
            assert line
            bottom = view["y"] + view["height"]
            # the words and the tool line are whole, above the card, inside the transcript
            return bool(
                view["y"] <= asked["y"]
                and asked["y"] + asked["height"] <= line["y"]
                and line["y"] + line["height"] <= min(bottom, box["y"])
            )

        await _eventually(in_view, "the request's words and tool line above its card")
        await _shoot(page, tmp_path, "console-approval.png")
        await page.click('#approval button[data-answer="approve"]')
        await expect(page.locator(".msg.assistant").last).to_have_text("Shared.", timeout=WAIT_MS)
        await watched.assert_clean()


@tool
async def share_it(ctx: ToolContext) -> bool:
    """Share the note once the person approves."""
    approved = await ctx.request_input(id="share", prompt="Share it?", schema={"type": "boolean"})
    return approved is True


async def test_the_console_fits_a_phone(tmp_path, browser):
    wide = " | ".join(f"column {i}" for i in range(12))
    text = (
        f"{MARKDOWN_REPLY}\n\n| {wide} |\n|{' --- |' * 12}\n| {' | '.join(['value'] * 12)} |\n\n"
        f"```\nx = {'1 + ' * 60}1\n```\n\nhttps://example.com/{'a' * 150}"
    )

    def script(request: ModelRequest) -> Any:
        if isinstance(request.messages[-1], ToolMessage):
            return reply("Shared.")
        return reply(text, call("share_it"))

    context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = await context.new_page()
    watched = await _watch(page)

    async def fits() -> bool:
        return bool(await page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"])

    async with serving(tmp_path, model=ScriptedModel(script), tools=[share_it]) as served:
        await page.goto(served.base_url + "/")
        await expect(page.locator(".suggestion").first).to_be_visible(timeout=WAIT_MS)
        assert await fits()
        composer = await page.locator("#composer").bounding_box()
        assert composer
        assert composer["width"] >= 250
        assert composer["x"] + composer["width"] <= PHONE["width"]
        await _send(page, "everything at once")

        card = page.locator("#approval")
        await expect(card).to_contain_text("Share it?", timeout=WAIT_MS)
        await expect(page.locator(".msg.assistant table")).to_have_count(2)
        assert await fits()  # the wide table and code scroll inside the reply, not the page
        box = await card.bounding_box()
        assert box
        assert box["x"] >= 0
        assert box["x"] + box["width"] <= PHONE["width"]
        await _shoot(page, tmp_path, "console-phone.png")
        await card.locator('button[data-answer="approve"]').tap()
        await expect(page.locator(".msg.assistant").last).to_have_text("Shared.", timeout=WAIT_MS)

        # the sessions slide in from the menu, and go again
        sessions = page.locator("#new-session")
        await expect(sessions).to_be_hidden()
        await page.tap("#menu")
        await expect(sessions).to_be_visible()
        assert await fits()
        await page.keyboard.press("Escape")
        await expect(sessions).to_be_hidden()
        await watched.assert_clean()
    await context.close()


async def test_an_empty_session_offers_prompts_to_try(tmp_path, page):
    watched = await _watch(page)
    async with serving(tmp_path) as served:
        await page.goto(served.base_url + "/")
        suggestions = page.locator("#transcript .suggestion")
        await expect(suggestions).to_have_count(4, timeout=WAIT_MS)
        await _shoot(page, tmp_path, "console-empty.png")
        await suggestions.filter(has_text="Remember that the launch is on Monday").click()

        await expect(page.locator(".msg.user")).to_have_text(
            ["Remember that the launch is on Monday"]
        )
        await expect(page.locator(".msg.assistant").last).to_contain_text("Noted", timeout=WAIT_MS)
        await expect(suggestions).to_have_count(0)
        await watched.assert_clean()


async def test_the_page_and_its_files_come_from_its_own_origin_under_a_strict_policy(
    tmp_path, page
):
    watched = await _watch(page)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    async with serving(tmp_path) as served:
        response = await page.goto(served.base_url + "/")
        assert response
        policy = response.headers["content-security-policy"]
        await expect(page.locator(".suggestion").first).to_be_visible(timeout=WAIT_MS)
        icon = await page.evaluate(
            """async () => {
                const href = document.querySelector('link[rel="icon"]').href;
                const r = await fetch(href);
                const img = new Image();
                img.src = href;
                await img.decode();
                return [href, r.status, r.headers.get('content-type'), img.naturalWidth];
            }"""
        )
        async with served.http.get(served.base_url + "/favicon.svg") as r:
            svg = (r.status, r.headers["Content-Type"], await r.text())
        async with served.http.get(served.base_url + "/static/console.js") as r:
            tag = r.headers["ETag"]
        again = {"If-None-Match": tag}
        async with served.http.get(served.base_url + "/static/console.js", headers=again) as r:
            unchanged = r.status
        await watched.assert_clean()

    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["img-src"] == "'self'"
    assert directives["default-src"] == "'none'"
    assert directives["require-trusted-types-for"] == "'script'"
    assert "unsafe" not in policy
    assert icon == [served.base_url + "/favicon.svg", 200, "image/svg+xml", 32]
    assert svg[0] == 200
    assert unchanged == 304  # a reload downloads none of it again
    assert svg[2].startswith("<svg")
    assert [url for url in asked if not url.startswith(served.base_url)] == []
    assert {url.removeprefix(served.base_url) for url in asked} >= {
        "/",
        "/static/console.js",
        "/static/markdown.js",
        "/static/vendor/marked.umd.js",
        "/static/vendor/purify.min.js",
        "/static/console.css",
    }
