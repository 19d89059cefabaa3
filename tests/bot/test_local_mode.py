"""``python -m bot`` with no credentials: the console and the API on loopback, durable."""

from __future__ import annotations

import asyncio
import signal

import aiohttp

from tests.bot.local_process import local_bot, run_to_exit
from tests.bot.test_slack_process import free_port

JSON = {"Content-Type": "application/json"}


async def test_with_no_credentials_it_serves_the_console_and_the_demo_flow_survives_a_kill(
    tmp_path,
):
    port = free_port()
    async with aiohttp.ClientSession() as http:
        async with local_bot(tmp_path, port) as bot:
            await bot.line_with("ANTHROPIC_API_KEY")
            printed = "\n".join(bot.out)
            async with http.get(bot.base_url + "/") as r:
                page = await r.text()
            async with http.get(bot.base_url + "/api/info") as r:
                info = await r.json()
            async with http.post(
                bot.base_url + "/api/sessions/demo/turns", json={"text": "share the launch date"}
            ) as r:
                parked = await r.json()
            bot.proc.send_signal(signal.SIGKILL)  # parked, and then the process is gone
            await bot.proc.wait()

        async with local_bot(tmp_path, port) as bot:
            async with http.get(bot.base_url + "/api/sessions/demo") as r:
                waiting = await r.json()
            resume = f"/api/sessions/demo/turns/{parked['turn_id']}/resume"
            async with http.post(
                bot.base_url + resume, json={"input_id": "share", "value": True}
            ) as r:
                accepted = r.status
            async with http.get(
                bot.base_url + "/api/sessions/demo/events",
                headers={"Last-Event-ID": str(waiting["last_event_id"])},
            ) as r:
                lines: list[str] = []
                async with asyncio.timeout(10):
                    while not any("turn.completed" in line for line in lines):
                        lines.append((await r.content.readline()).decode())
            async with http.get(bot.base_url + "/api/sessions/demo/transcript") as r:
                transcript = await r.json()
            bot.proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(10):
                code = await bot.proc.wait()
            said = await bot.rest()

    assert f"Open http://127.0.0.1:{port}/ in your browser" in printed
    assert "offline demo model" in printed
    assert "SLACK_BOT_TOKEN" in printed  # what the real thing needs
    assert "ANTHROPIC_API_KEY" in printed
    assert "<title>" in page
    assert info["offline"] is True
    assert info["principal"] == "local"
    assert parked["status"] == "suspended"
    assert waiting["status"] == "suspended"
    assert waiting["pending"]["prompt"].startswith("Share this note?")
    assert accepted == 202
    assert "id: 8\n" in lines  # the log goes on where the killed process left it
    notes = [m for m in transcript["messages"] if m["role"] == "tool"]
    assert [m["result"] for m in notes] == [{"notes": 1}, {"shared": True, "expired": False}]
    assert code == 0
    assert "Traceback" not in said, said


async def test_a_port_in_use_is_named_and_stops_the_bot(tmp_path):
    port = free_port()
    async with local_bot(tmp_path, port):
        code, _, err = await run_to_exit(tmp_path, port)

    assert code == 2
    assert f"Cannot start: cannot listen on 127.0.0.1:{port}" in err
    assert "set PORT to a free port" in err
    assert "Traceback" not in err


async def test_api_tokens_that_are_too_short_stop_the_bot_without_echoing_them(tmp_path):
    secret = "short-secret"
    code, out, err = await run_to_exit(tmp_path, free_port(), API_TOKENS=f'{{"{secret}": "ana"}}')

    assert code == 2
    assert "API_TOKENS: token 1 must be at least 24 characters" in err
    assert secret not in out + err
