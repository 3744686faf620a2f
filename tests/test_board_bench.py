"""`tvmtui bench` of a session tuned through a tracker: every runtime runs on that board
(here a real `tvmtui.devices.server` on 127.0.0.1), parity against tuned TVM run there, a
runtime the board lacks says so, and a board that drops mid-bench saves nothing."""

from __future__ import annotations

import json
import time

import pytest

from .rpc_farm import Farm


@pytest.fixture
def tuned_board(cli, tmp_path):
    """A farm whose board lacks ONNX Runtime (a package on its path that fails to import),
    and a session of dwconv:D9 tuned on it."""
    lacking = tmp_path / "board-site"
    (lacking / "onnxruntime").mkdir(parents=True)
    (lacking / "onnxruntime" / "__init__.py").write_text(
        "raise ImportError('this board has no ONNX Runtime')\n")
    import os

    farm = Farm(tmp_path).start()
    path = os.pathsep.join(p for p in (str(lacking), os.environ.get("PYTHONPATH")) if p)
    board = farm.add_server("brd", {"PYTHONPATH": path})
    out = cli.run("tune", "dwconv:D9", "--trials", "8", "--session", "b", "--variants", "nchw",
                  "--device", f"tracker://{farm.tracker}/brd", "--json")
    assert out.returncode == 0, out.stderr
    yield farm, board
    farm.stop()


def test_bench_of_a_board_session_runs_on_the_board(cli, tuned_board):
    farm, board = tuned_board
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


def test_a_board_that_drops_mid_bench_saves_nothing(cli, tuned_board):
    farm, board = tuned_board
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
    session = cli.session("b")
    assert list(session.iter_events("bench")) == []
