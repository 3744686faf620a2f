"""The real Textual app, driven by its Pilot, against a real tuning worker."""

from __future__ import annotations

import asyncio
import time

from tvmtui.sessions.store import Session
from tvmtui.tui.app import TvmTuiApp
from tvmtui.tui.screens import LaunchScreen, LiveScreen, MessageModal, SessionsScreen


async def wait_until(pilot, predicate, timeout: float = 240.0, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        await pilot.pause(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def live(app) -> LiveScreen:
    assert isinstance(app.screen, LiveScreen), type(app.screen).__name__
    return app.screen


async def _first_app(root):
    app = TvmTuiApp(root, start="launch")
    async with app.run_test(size=(80, 24)) as pilot:
        assert isinstance(app.screen, LaunchScreen)
        screen = app.screen
        workloads = screen.query_one("#workloads")
        workloads.highlighted = [o.id for o in workloads.options].index("dwconv:D9")
        screen.query_one("#trials").value = "500"
        screen.query_one("#minutes").value = "30"
        screen.query_one("#session-name").value = "ui"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, LiveScreen), 60, "live screen")
        await wait_until(pilot, lambda: live(app).view.trials >= 1, what="first trials")
        view = live(app).view
        assert "or until" in str(live(app).query_one("#summary").content)  # its time budget
        assert live(app).query_one("#task-table").row_count == len(view.tasks) >= 1
        if len(view.variant_labels) > 1:  # D9 is blocked too: the line shows each variant
            await wait_until(pilot, lambda: str(live(app).query_one("#variants-line").content)
                             .startswith("variants: "), 30, "variants line")
            line = str(live(app).query_one("#variants-line").content)
            assert all(label in line for label in view.variant_labels.values())

        await pilot.press("p")
        await wait_until(pilot, lambda: live(app).view.state == "paused", what="paused")
        await pilot.press("p")
        await wait_until(pilot, lambda: live(app).view.state == "running", what="resumed")

        await pilot.press("plus")
        await pilot.pause(0.3)
        budget_input = app.screen.query_one("#budget-input")
        budget_input.value = "400"
        await pilot.press("enter")
        session = Session.open(root, "ui")
        await wait_until(pilot, lambda: session.meta()["budget"] == 400, 30, "budget")

        # Drill into a trial: its message and schedule trace.
        await pilot.press("2")
        live(app).query_one("#trial-stream").focus()
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert isinstance(app.screen, MessageModal)
        assert "schedule trace" in app.screen.body and "sch." in app.screen.body
        await pilot.press("escape")
        await pilot.press("q")  # quitting the app leaves the worker tuning
    assert session.worker_alive()
    return session


async def _second_app(root, session):
    app = TvmTuiApp(root, start="sessions")
    async with app.run_test(size=(80, 24)) as pilot:
        assert isinstance(app.screen, SessionsScreen)
        await pilot.pause(0.3)
        await pilot.press("enter")  # re-attach
        await wait_until(pilot, lambda: isinstance(app.screen, LiveScreen), 30, "re-attach")
        seen = live(app).view.trials
        await wait_until(pilot, lambda: live(app).view.trials > seen, what="more trials")
        await pilot.press("s")
        await pilot.press("y")
        await wait_until(pilot, lambda: live(app).status == "stopped", what="stopped")
        stopped_at = session.meta()["trials"]

        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen), 10, "sessions")
        await pilot.press("r")  # resume: a new worker continues the session
        await wait_until(pilot, lambda: isinstance(app.screen, LiveScreen), 60, "resumed live")
        await wait_until(pilot, lambda: live(app).view.trials > stopped_at, what="resumed trials")
        await pilot.press("s")
        await pilot.press("y")
        await wait_until(pilot, lambda: live(app).status == "stopped", what="stopped again")

        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen), 10, "sessions")
        await pilot.press("y")  # replay at 10x
        await wait_until(pilot, lambda: isinstance(app.screen, LiveScreen), 10, "replay")
        screen = live(app)
        assert not screen.source.live
        for _ in range(200):
            await pilot.press("n")  # step through the rounds
            if screen.source.finished:
                break
        await pilot.pause(0.5)
        assert screen.view.trials == session.meta()["trials"]


def test_app_drives_a_real_worker_end_to_end(tmp_path):
    root = tmp_path / "sessions"

    async def scenario():
        session = await _first_app(root)
        await _second_app(root, session)

    asyncio.run(scenario())
    trials = [e["trial"] for e in Session.open(root, "ui").iter_events("trial")]
    assert trials == list(range(1, len(trials) + 1))


def test_bad_input_in_the_app_is_a_message_and_the_app_keeps_running(tmp_path):
    root = tmp_path / "sessions"
    bad = root / "corrupt"
    bad.mkdir(parents=True)
    (bad / "session.sqlite").write_bytes(b"not a database" * 40)

    async def scenario():
        app = TvmTuiApp(root, start="launch")
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            screen.query_one("#model-path").value = str(tmp_path / "missing.onnx")
            await pilot.press("ctrl+s")
            await pilot.pause(1.0)
            messages = [n.message for n in app._notifications]
            assert any("not found" in m for m in messages), messages
            screen.query_one("#model-path").value = ""
            screen.query_one("#shapes").value = "input=1xthree"
            await pilot.press("ctrl+s")
            await pilot.pause(1.0)
            assert any("bad --shape" in n.message for n in app._notifications)
            screen.query_one("#shapes").value = ""
            screen.query_one("#trials").value = "0"
            await pilot.press("ctrl+s")
            await pilot.pause(1.0)
            assert any("at least 1" in n.message for n in app._notifications)
            screen.query_one("#trials").value = "8"
            screen.query_one("#minutes").value = "-2"
            await pilot.press("ctrl+s")
            await pilot.pause(1.0)
            assert any("--minutes must be" in n.message for n in app._notifications)
            app.open_live("corrupt")
            await pilot.pause(0.3)
            assert any("corrupted" in n.message for n in app._notifications)
            assert isinstance(app.screen, LaunchScreen)
            await pilot.press("f2")
            await pilot.pause(0.5)
            note = str(app.screen.query_one("#sessions-note").render())
            assert "corrupted" in note

    asyncio.run(scenario())


def test_a_dying_worker_and_a_locked_session_are_messages_not_crashes(cli):
    import fcntl
    import os
    import signal

    started = cli.run("tune", "dwconv:D9", "--trials", "500", "--session", "doomed", "--detach")
    assert started.returncode == 0, started.stderr
    cli.root.mkdir(parents=True, exist_ok=True)
    Session.create(cli.root, "locked", {
        "workload": {"name": "w", "graph_hash": "h"}, "target": {"kind": "llvm"}, "budget": 4,
        "status": "running"}).close()

    async def scenario():
        app = TvmTuiApp(cli.root, start="live", session="doomed")
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_until(pilot, lambda: live(app).view.trials >= 1, what="trials")
            os.kill(Session.open(cli.root, "doomed").meta()["pid"], signal.SIGKILL)
            await wait_until(pilot, lambda: live(app).status == "crashed", 30, "crashed")
            assert any("died" in n.message for n in app._notifications)
            await pilot.resize_terminal(160, 48)  # the app survives resizes too
            await pilot.pause(0.3)
            assert live(app).query_one("#task-table").size.width > 100
            await pilot.resize_terminal(80, 24)
            await pilot.pause(0.3)

            # A session another process is working on cannot be deleted from the app.
            with open(cli.root / "locked" / "worker.lock", "a+") as held:
                fcntl.flock(held, fcntl.LOCK_EX)
                app.show_sessions()
                await pilot.pause(0.5)
                table = app.screen.query_one("#sessions-table")
                row = [table.coordinate_to_cell_key((i, 0)).row_key.value
                       for i in range(table.row_count)].index("locked")
                table.move_cursor(row=row)
                await pilot.press("d")
                await pilot.press("y")
                await pilot.pause(0.5)
                assert any("running worker" in n.message for n in app._notifications)
            assert (cli.root / "locked").exists()

    asyncio.run(scenario())


def test_resume_a_finished_session_from_the_app_asks_for_more_trials(cli):
    tuned = cli.run("tune", "dwconv:D9", "--trials", "4", "--variants", "nchw", "--session",
                    "more", "--json")
    assert tuned.returncode == 0, tuned.stderr

    async def scenario():
        app = TvmTuiApp(cli.root, start="sessions")
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen), 30, "sessions")
            await pilot.pause(0.5)
            await pilot.press("r")
            await wait_until(pilot, lambda: bool(app.screen.query("#budget-input")), 30, "prompt")
            title = str(app.screen.query_one("#modal-title").content)
            assert "finished with 4 trials" in title and "how many more" in title
            app.screen.query_one("#budget-input").value = "4"
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, LiveScreen), 120, "live")
            await wait_until(pilot, lambda: live(app).view.state == "finished"
                             and live(app).view.trials == 8, 300, "8 trials")

    asyncio.run(scenario())
