"""Pictures of the main screens at 80x24 (SSH) and 160x48 (projector).

Frozen for stability: the device is fixed instead of asked of LLVM, the sessions folder is a
fixed relative name holding only the bundled demo, and the live screen is the demo replay
stepped to its end (its times come from the recorded events, not the clock).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tvmtui.tui.app import TvmTuiApp

SIZES = [(80, 24), (160, 48)]
FIXED_TARGET = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver3", "num-cores": 2}
ROOT = Path("no-such-sessions-dir")


def make_app(start: str, session: str | None = None) -> TvmTuiApp:
    app = TvmTuiApp(ROOT, start=start, session=session, speed=1.0)
    app._target = FIXED_TARGET
    return app


async def settle_launch(pilot) -> None:
    devices = pilot.app.screen.query_one("#devices")
    for _ in range(40):
        if "asking" not in str(devices.get_option_at_index(0).prompt):
            break
        await pilot.pause(0.05)
    await pilot.pause()


async def replay_to_end(pilot) -> None:
    screen = pilot.app.screen
    screen.source.toggle()  # pause playback: only steps move it
    while not screen.source.finished:
        await pilot.press("n")
    screen.tick()
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_launch_screen(snap_compare, size):
    assert snap_compare(make_app("launch"), terminal_size=size, run_before=settle_launch)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_sessions_screen(snap_compare, size):
    assert snap_compare(make_app("sessions"), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("tab", ["1", "2", "3"])
def test_live_screen_replaying_the_demo(snap_compare, size, tab):
    async def run_before(pilot):
        await replay_to_end(pilot)
        await pilot.press(tab)
        await pilot.pause()

    assert snap_compare(make_app("replay", "demo"), terminal_size=size, run_before=run_before)


def test_help(snap_compare):
    assert snap_compare(make_app("sessions"), terminal_size=(80, 24), press=["question_mark"])
