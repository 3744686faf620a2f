"""`tvmtui bench` of a session tuned through a tracker: every runtime runs on that board
(here a real `tvmtui.board` on 127.0.0.1), parity against tuned TVM run there, a
runtime the board lacks says so, and a board that drops mid-bench saves nothing."""

from __future__ import annotations

import asyncio
import io
import json
import os
import time

import pytest
from rich.console import Console

from .conftest import Cli
from .rpc_farm import Farm


@pytest.fixture(scope="module")
def tuned_board(tmp_path_factory):
    """A farm whose board lacks ONNX Runtime (a package on its path that fails to import),
    and a session of dwconv:D9 tuned on it. The last test of this file kills the board."""
    tmp = tmp_path_factory.mktemp("board")
    lacking = tmp / "board-site"
    (lacking / "onnxruntime").mkdir(parents=True)
    (lacking / "onnxruntime" / "__init__.py").write_text(
        "raise ImportError('this board has no ONNX Runtime')\n")
    farm = Farm(tmp).start()
    path = os.pathsep.join(p for p in (str(lacking), os.environ.get("PYTHONPATH")) if p)
    board = farm.add_server("brd", {"PYTHONPATH": path})
    cli = Cli(tmp / "sessions")
    out = cli.run("tune", "dwconv:D9", "--trials", "8", "--session", "b", "--variants", "nchw",
                  "--device", f"tracker://{farm.tracker}/brd", "--json")
    assert out.returncode == 0, out.stderr
    yield farm, board, cli
    farm.stop()


def test_the_app_benches_a_board_session_on_the_board(tuned_board):
    from tvmtui.tui.app import TvmTuiApp
    from tvmtui.tui.screens import LiveScreen

    from .test_app import wait_until

    farm, board, cli = tuned_board

    async def drive():
        app = TvmTuiApp(cli.root, start="live", session="b")
        async with app.run_test(size=(110, 30)) as pilot:
            screen = app.screen
            assert isinstance(screen, LiveScreen)
            await pilot.press("b")
            await wait_until(pilot, lambda: screen.view.bench is not None, 300, "the bench event")
            await pilot.pause(0.6)
            console = Console(width=110, record=True, file=io.StringIO())
            console.print(screen.query_one("#baseline-panel").content)
            return console.export_text()

    text = asyncio.run(drive())
    assert f"on board 127.0.0.1:{board}" in text, text
    assert "tflite" in text and "not installed on the board" in text, text


def test_bench_of_a_board_session_runs_on_the_board(tuned_board):
    farm, board, cli = tuned_board
    out = cli.run("bench", "b", "--baselines", "tflite,onnxruntime,tvm-untuned", "--frames", "4",
                  "--repeats", "20", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    where = f"board 127.0.0.1:{board}"
    assert report["device"] == where
    rows = {r["name"]: r for r in report["baselines"]}
    assert all(r["device"] == where for r in rows.values())
    for name in ("tflite", "tvm-untuned", "tvm-tuned"):
        assert rows[name]["available"], rows[name]
        assert rows[name]["parity"]["passed"] and rows[name]["parity"]["against"] == "tvm-tuned"
        assert rows[name]["median_ms"] > 0
    assert rows["tflite"]["speedup"] is not None
    assert not rows["onnxruntime"]["available"]
    assert rows["onnxruntime"]["reason"].startswith("not installed on the board")
    # The board served it: its server log shows the bench's session.
    assert farm.server_log(board).count("start serving") >= 2
    shown = json.loads(cli.run("sessions", "show", "b", "--json").stdout)
    assert shown["speedup"]["device"] == where  # the saved bench summary


@pytest.mark.slow  # over a minute: `.ci/run` runs `-m slow`
def test_a_board_that_drops_mid_bench_saves_nothing(tuned_board):
    farm, board, cli = tuned_board
    saved = len(list(cli.session("b").iter_events("bench")))
    seen = farm.server_log(board).count("start serving")
    proc = cli.popen("bench", "b", "--baselines", "tflite,tvm-untuned", "--frames", "100",
                     "--repeats", "1000", "--max-seconds", "60", "--json")
    deadline = time.time() + 120
    while farm.server_log(board).count("start serving") == seen and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(3)  # the runtimes are loaded on the board and measuring
    farm.kill_server(board)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    assert "dropped mid-bench" in err and "nothing was saved" in err
    assert len(err.strip().splitlines()) == 1, err
    report = json.loads(out)
    assert all(not r["available"] and "dropped mid-bench" in r["reason"]
               for r in report["baselines"]), report["baselines"]
    assert len(list(cli.session("b").iter_events("bench"))) == saved
