"""`tvmtui --web` as a demo audience sees it: Debian's Chromium, driven by Playwright, opens the
page, the app starts behind it, the demo replays and tabs switch with keys typed into the page.

Run with `-m browser`; `.ci/run` installs Debian's `chromium` first (Playwright downloads no
browser here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.rpc_farm import free_port

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Flags for a headless Chromium on a machine without a network: no background fetches.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
LOCAL = ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")


@pytest.fixture
def web_app(tmp_path):
    """The `tvmtui --web` server on a free port; yields its URL."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    port = free_port()
    env = dict(os.environ, TVMTUI_SESSIONS=str(tmp_path / "sessions"))
    server = subprocess.Popen([sys.executable, "-m", "tvmtui", "--web", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_demo_replays_in_chromium(web_app, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]'")
    received: list[str] = []   # what the page's terminal was sent, in order
    outside: list[str] = []    # any request to somewhere other than this machine

    def shown_since(mark: int) -> str:
        return "".join(received[mark:])

    def wait_for(text: str, mark: int, seconds: float = 90) -> None:
        deadline = time.time() + seconds
        while text not in shown_since(mark):
            assert time.time() < deadline, f"the page never showed {text!r}"
            page.wait_for_timeout(200)

    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("request", lambda r: None if r.url.startswith(LOCAL) else outside.append(r.url))
            page.on("websocket", lambda ws: ws.on(
                "framereceived",
                lambda f: received.append(f if isinstance(f, str) else f.decode("utf-8", "replace"))))
            page.goto(web_app)
            # textual.js marks the body when the app's first bytes arrive (the splash goes).
            page.wait_for_selector("body.-first-byte", timeout=120_000)
            wait_for("New tuning session", 0)
            assert "needs a terminal" not in shown_since(0)
            page.click("#terminal")

            mark = len(received)
            page.keyboard.press("F2")
            wait_for("Sessions", mark)
            wait_for("demo", mark)

            mark = len(received)
            page.keyboard.press("y")  # replay the highlighted session: the bundled demo
            wait_for("replay", mark)
            wait_for("conv:C2", mark)
            page.wait_for_timeout(1500)
            live = page.screenshot(path=str(tmp_path / "replay.png"))

            mark = len(received)
            page.keyboard.press("4")  # the Baselines tab
            wait_for("tuning estimate", mark)
            page.wait_for_timeout(1000)
            baselines = page.screenshot(path=str(tmp_path / "baselines.png"))
            assert baselines != live, "the page did not change when the tab did"
        finally:
            browser.close()
    assert outside == [], f"the page fetched from outside this machine: {outside}"
