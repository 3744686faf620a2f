"""`tvmtui --web`: textual-serve's page and the app behind its websocket, driven as the
page's script drives it (a real browser test needs Chromium, which CI does not install)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.rpc_farm import free_port

pytest.importorskip("textual_serve", reason="--web needs the [web] extra (textual-serve)")


async def _screen_text(port: int, seconds: float) -> str:
    """What the app writes to the page's terminal within `seconds`."""
    import aiohttp

    seen = []
    async with aiohttp.ClientSession() as client:
        async with client.ws_connect(f"http://127.0.0.1:{port}/ws?width=100&height=30") as ws:
            await ws.send_json(["resize", {"width": 100, "height": 30}])
            deadline = time.time() + seconds
            while time.time() < deadline:
                try:
                    msg = await ws.receive(timeout=max(0.1, deadline - time.time()))
                except asyncio.TimeoutError:
                    break
                if msg.type == aiohttp.WSMsgType.BINARY:
                    seen.append(msg.data.decode("utf-8", "replace"))
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    seen.append(msg.data)
                elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    break
                if "New tuning session" in "".join(seen):
                    break
    return "".join(seen)


def test_web_serves_the_page_and_the_app_starts_behind_it(tmp_path):
    port = free_port()
    env = dict(os.environ, TVMTUI_SESSIONS=str(tmp_path / "sessions"))
    server = subprocess.Popen([sys.executable, "-m", "tvmtui", "--web", "--port", str(port)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        page = None
        for _ in range(100):
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read()
                break
            except OSError:
                time.sleep(0.2)
        assert page and b"tvmtui" in page
        text = asyncio.run(_screen_text(port, 60))
        assert "the app needs a terminal" not in text
        assert "New tuning session" in text, text[-800:]
    finally:
        server.terminate()
        server.wait(timeout=20)
