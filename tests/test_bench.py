"""`tvmtui bench`: real LiteRT, ONNX Runtime, OpenVINO and TVM builds, each in its own
process; the parity gate; results saved into the session and shown by the app."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
from dataclasses import asdict

import numpy as np
import pytest
from rich.console import Console

from tvmtui import fmt
from tvmtui.baselines.bench import BenchRequest, run_bench
from tvmtui.baselines.frames import seeded_frames
from tvmtui.baselines.model import bench_model
from tvmtui.devices.local import cpu_count
from tvmtui.sessions import store as st

from .conftest import Cli

QUICK = ("--frames", "4", "--repeats", "20", "--warmup", "3", "--max-seconds", "1")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Cli:
    """One tuned depthwise session (dwconv:D9, 16 trials) shared by the tests here."""
    cli = Cli(tmp_path_factory.mktemp("bench") / "sessions")
    out = cli.run("tune", "dwconv:D9", "--trials", "16", "--session", "d9", "--json")
    assert out.returncode == 0, out.stderr
    return cli


def test_bench_contract_and_saved_results(tuned):
    out = tuned.run("bench", "d9", "--json", *QUICK)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    rows = {b["name"]: b for b in report["baselines"]}
    assert list(rows) == ["tflite", "acl", "onnxruntime", "openvino", "tvm-untuned", "tvm-tuned"]
    for row in rows.values():
        assert {"name", "available", "reason", "median_ms", "iqr_ms", "threads", "speedup",
                "parity"} <= set(row)
    # No Arm NN delegate on this machine: a reason, not an error.
    assert rows["acl"]["available"] is False
    assert rows["acl"]["reason"].startswith("not available here")
    tuned_ms = rows["tvm-tuned"]["median_ms"]
    assert report["reference"] == "tvm-tuned" and tuned_ms > 0
    for name in ("tflite", "onnxruntime", "openvino", "tvm-untuned"):
        row = rows[name]
        assert row["available"], (name, row["reason"])
        assert row["threads"] == cpu_count()
        assert row["median_ms"] > 0 and row["iqr_ms"] >= 0
        parity = row["parity"]
        assert parity["frames"] == 4 and parity["passed"], (name, parity)
        assert parity["max_abs_err"] <= 1e-4
        assert row["speedup"] == pytest.approx(row["median_ms"] / tuned_ms)
    # Which build is which (how much faster tuning made it is a benchmark's claim, not a
    # test's: on a 0.01 ms operator machine load alone can swap the two).
    assert "16 trials" in rows["tvm-tuned"]["detail"]
    assert "no tuning records" in rows["tvm-untuned"]["detail"]
    assert report["variant"] and report["layers"]
    shown = json.loads(tuned.run("sessions", "show", "d9", "--json").stdout)
    assert report["variant"] == shown["variant_label"]
    assert {layer["variant"] for layer in report["layers"]} <= {shown["variant"], "shared"}

    # Saved: a `bench` event in the stream and the summary in `sessions list`.
    session = tuned.session("d9")
    events = list(session.iter_events("bench"))
    assert events and events[-1]["baselines"][0]["name"] == "tflite"
    session.close()
    listed = {s["name"]: s for s in json.loads(tuned.run("sessions", "list", "--json").stdout)}
    summary = listed["d9"]["speedup"]
    fastest = min((r for r in rows.values() if r["name"] != "tvm-tuned" and r["speedup"]),
                  key=lambda r: r["median_ms"])
    assert summary["vs"] == fastest["name"]
    assert summary["speedup"] == pytest.approx(fastest["speedup"])
    table = tuned.run("sessions", "list")
    assert f"{fastest['speedup']:.2f}x" in table.stdout


def test_rich_table_and_seeded_inputs_folder(tuned, tmp_path):
    frames = tmp_path / "frames"
    frames.mkdir()
    rng = np.random.default_rng(7)
    for i in range(3):
        np.save(frames / f"{i:03}.npy", rng.standard_normal((1, 1024, 7, 7)).astype(np.float32))
    out = tuned.run("bench", "d9", "--baselines", "onnxruntime", "--inputs", str(frames),
                    "--no-save", *QUICK)
    assert out.returncode == 0, out.stderr
    assert "onnxruntime" in out.stdout and "tvm-tuned" in out.stdout
    assert "on 3 frame(s)" in out.stdout
    assert "ok " in out.stdout


def test_parity_gate_rejects_a_perturbed_tvm_build(tuned):
    """TVM's side gets a model with one weight changed: every speedup is voided."""
    import onnx
    from onnx import numpy_helper

    root = tuned.root
    shutil.copytree(root / "d9", root / "d9-bad")
    (root / "d9-bad" / st.LOCK_FILE).unlink(missing_ok=True)
    model_path = root / "d9-bad" / "model.onnx"
    original = model_path.read_bytes()
    model = onnx.load_from_string(original)
    weight = model.graph.initializer[0]
    values = numpy_helper.to_array(weight).copy()
    values.flat[0] += 0.05
    weight.CopyFrom(numpy_helper.from_array(values, weight.name))
    model_path.write_bytes(model.SerializeToString())

    # From the command line, the changed file is caught before anything runs.
    out = tuned.run("bench", "d9-bad", "--json", *QUICK)
    assert out.returncode == 2 and "changed since it was tuned" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1

    # The gate itself: baselines on the true model, tuned TVM built from the changed one.
    session = st.Session.open(root, "d9-bad")
    meta = session.meta()
    model = bench_model(meta["workload"], original)
    report = run_bench(BenchRequest(
        model=model, target=meta["target"], baselines=["onnxruntime", "tflite"],
        frames=seeded_frames(model, 3), threads=cpu_count(), warmup=2, repeats=10,
        max_seconds=1, session=session,
    ))
    session.close()
    rows = {b.name: b for b in report.baselines}
    for name in ("onnxruntime", "tflite"):
        row = rows[name]
        assert row.parity.passed is False
        assert row.parity.max_abs_err > 1e-3
        assert row.speedup is None and row.speedup_unchecked > 0
        assert fmt.speedup_cell(asdict(row)) == "FAILED parity"
        # The graph in float64 (the true model) names the side that is wrong: TVM's.
        assert [o["passed"] for o in row.parity.outputs] == [False], row.parity.outputs
        assert row.parity.exact["outputs"][0]["off"] == "reference", row.parity.exact
        assert "tvm-tuned is off" in row.parity.verdict, row.parity.verdict
    assert report.summary()["speedup"] is None
    assert set(report.summary()["failed"]) == {"onnxruntime", "tflite"}


def test_a_float32_rounding_miss_is_judged_neither_side_wrong(tuned):
    """At a tolerance below float32 rounding, the runtimes miss; the float64 graph says
    both are rounding, per output, and the report says what the frames were."""
    out = tuned.run("bench", "d9", "--json", "--baselines", "onnxruntime,tflite",
                    "--tolerance", "1e-12", "--no-save", *QUICK)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert "input: N(0, 1) (not an image)" in report["inputs"], report["inputs"]
    missed = [b for b in report["baselines"] if b["parity"] and not b["parity"]["passed"]]
    assert missed, report["baselines"]
    for row in missed:
        parity = row["parity"]
        assert parity["outputs"][0]["shape"] == [1, 1024, 7, 7]
        assert parity["outputs"][0]["max_rel_err"] == pytest.approx(parity["max_rel_err"])
        assert "neither is wrong" in parity["verdict"], parity["verdict"]
        judged = parity["exact"]["outputs"][0]
        assert judged["off"] == "neither" and 0 < judged["baseline_err"] < 1e-5
    name = missed[0]["name"]
    table = tuned.run("bench", "d9", "--baselines", name, "--tolerance", "1e-12",
                      "--no-save", *QUICK)
    assert f"{name} verdict: against the graph in float64" in table.stdout, table.stdout
    assert "inputs: seeded frames" in table.stdout


def test_workload_without_session_and_bad_input(tuned, tmp_path):
    out = tuned.run("bench", "dwconv:D8", "--baselines", "onnxruntime,tvm-untuned", "--json",
                    *QUICK)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    rows = {b["name"]: b for b in report["baselines"]}
    assert report["reference"] == "tvm-untuned"
    assert rows["tvm-tuned"]["available"] is False
    assert "tune it first" in rows["tvm-tuned"]["reason"]
    assert rows["onnxruntime"]["parity"]["passed"] and rows["onnxruntime"]["speedup"] is None

    # The same workload by name finds the tuned session.
    out = tuned.run("bench", "dwconv:D9", "--baselines", "onnxruntime", "--json", "--no-save",
                    *QUICK)
    report = json.loads(out.stdout)
    assert report["session"] == "d9" and report["notes"]

    bad_frames = tmp_path / "bad"
    bad_frames.mkdir()
    np.save(bad_frames / "0.npy", np.zeros((1, 3, 7, 7), np.float32))
    for args, words in [
        (("d9", "--baselines", "tflite,cudnn"), "unknown baseline cudnn"),
        (("d9", "--frames", "0"), "at least 1"),
        (("d9", "--tolerance", "0"), "--tolerance"),
        (("nothing-here",), "unknown workload"),
        (("d9", "--inputs", str(bad_frames)), "the model wants [1, 1024, 7, 7]"),
        (("d9", "--inputs", str(tmp_path / "missing")), "not a folder"),
    ]:
        out = tuned.run("bench", *args)
        assert out.returncode == 2, (args, out.stderr)
        assert words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_app_runs_baselines_for_the_session(tuned):
    from tvmtui.tui.app import TvmTuiApp
    from tvmtui.tui.screens import LiveScreen, SessionsScreen

    from .test_app import wait_until

    async def drive():
        app = TvmTuiApp(tuned.root, start="live", session="d9")
        async with app.run_test(size=(100, 30)) as pilot:
            screen = app.screen
            assert isinstance(screen, LiveScreen)
            before = screen.view.bench["created"] if screen.view.bench else 0
            await pilot.press("b")
            await pilot.pause(0.5)
            assert screen.bench_since is not None
            await wait_until(pilot, lambda: screen.bench_since is None, 300, "bench to finish")
            await wait_until(pilot, lambda: screen.view.bench and
                             screen.view.bench["created"] > before, 30, "the bench event")
            await pilot.pause(0.6)
            console = Console(width=100, record=True, file=io.StringIO())
            console.print(screen.query_one("#baseline-panel").content)
            text = console.export_text()
            assert "onnxruntime" in text and "not available" in text
            assert "inputs: seeded frames (seed 0): input: N(0, 1)" in text, text
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen), 10, "sessions")
            table = app.screen.query_one("DataTable")
            cells = [str(c) for c in table.get_row("d9")]
            assert any(c.endswith(("tflite", "onnxruntime", "openvino")) and "x " in c for c in cells)

    asyncio.run(drive())
