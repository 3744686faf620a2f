"""Real MetaSchedule runs on small budgets, driven through the `tvmtui` CLI."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest

from tvmtui.core.events import EVENT_NAMES
from tvmtui.sessions.store import RECORD_DB
from tvmtui.sessions.view import SessionView
from tvmtui.tuning.search import UNROLL_KEY

CONTRACT_TRIAL_KEYS = {"event", "t", "task", "trial", "build_s", "run_s", "predicted",
                       "error_kind", "error"}
SUMMARY_KEYS = {"name", "status", "workload", "graph_hash", "target", "trials", "best_ms", "updated"}


def _trials(session):
    return list(session.iter_events("trial"))


def _run_module(lib_path: str, x: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(lib_path), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _untuned(workload: str, x: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    from tvmtui.graph.relax_import import onnx_to_relax
    from tvmtui.workloads import load_workload

    wl = load_workload(workload)
    mod = onnx_to_relax(wl.model_bytes, wl.input_shapes)
    ex = relax.build(mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _target(session):
    import tvm

    return tvm.target.Target(session.meta()["target"])


def _task_mod(session):
    """The one task of a stock-graph single-conv session, as the worker extracted it."""
    from tvmtui.graph import lowering
    from tvmtui.graph import variants as gv
    from tvmtui.graph.relax_import import load_relax
    from tvmtui.sessions.store import model_file

    meta = session.meta()
    workload = meta["workload"]
    base = load_relax("onnx", session.file(model_file(workload)).read_bytes(),
                      workload["input_shapes"], gv.session_revision(meta))
    revision = gv.session_revision(meta)
    mod, _ = gv.prepare(base, _target(session), "nchw", revision=revision)
    (task,) = lowering.extract_tasks(mod, _target(session), revision)
    return task.dispatched[0]


def test_tune_resume_export_conv_c12(cli, tmp_path):
    # The stock graph: one task, so numbering and hashes below are exact (variants have
    # their own tests in test_variants.py).
    first = cli.run("tune", "conv:C12", "--trials", "16", "--session", "a", "--json",
                    "--variants", "nchw",
                    "--warmup-samples", "8")
    assert first.returncode == 0, first.stderr
    events = cli.json_lines(first.stdout)
    assert all({"event", "t"} <= e.keys() for e in events)
    assert {e["event"] for e in events} <= set(EVENT_NAMES)
    kinds = [e["event"] for e in events]
    for kind in ("session_started", "tasks_extracted", "trial", "cost_model_updated",
                 "task_best", "round_done", "state"):
        assert kind in kinds
    assert events[-1]["event"] == "state" and events[-1]["state"] == "finished"
    trial_events = [e for e in events if e["event"] == "trial"]
    assert len(trial_events) == 16 and all(CONTRACT_TRIAL_KEYS <= e.keys() for e in trial_events)
    # The first batch (4 of 16 samples) is what the screen waits for: it took the quickest
    # builds, none asking LLVM to unroll 512 steps (a random 4 would, two times in three).
    first_traces = [cli.session("a").trace(n) for n in range(1, 5)]
    assert all(first_traces)
    assert not any(f'ann_key="{UNROLL_KEY}", ann_val=512' in t for t in first_traces)

    second = cli.run("resume", "a", "--trials", "16", "--json")
    assert second.returncode == 0, second.stderr
    started = [e for e in cli.json_lines(second.stdout) if e["event"] == "session_started"]
    assert started[0]["resumed"] and started[0]["prior_trials"] == 16

    session = cli.session("a")
    trials = _trials(session)
    assert [t["trial"] for t in trials] == list(range(1, 33))
    assert {t["run"] for t in trials} == {0, 1}
    # No candidate measured twice: distinct structural hashes, distinct database traces.
    assert len({t["shash"] for t in trials}) == 32
    records = [json.loads(line) for line in session.file(RECORD_DB).read_text().splitlines()]
    assert len(records) == 32
    assert len({json.dumps(r[1][0]) for r in records}) == 32
    # The cost model scored candidates once it had trained on its warm-up samples.
    assert any(t["predicted"] is not None for t in trials[16:])

    # Once done, the conv's best records were measured again and the lowest median kept,
    # after each run (the first run's pick is stale once the resume tunes on).
    confirms = list(session.iter_events("confirmed"))
    assert [c["task"] for c in confirms] == [0, 0]
    last = confirms[-1]
    medians = [c["median_ms"] for c in last["candidates"]]
    assert 2 <= len(medians) <= 4 and all(m and m > 0 for m in medians)
    assert [c["rank"] for c in last["candidates"]] == list(range(len(medians)))
    assert last["confirmed_ms"] == min(medians) == medians[last["pick"]]
    # 3 rounds of 3 runs each (a round that failed under load would leave a multiple of 3)
    assert all(c["runs"] % 3 == 0 and 0 < c["runs"] <= 9 for c in last["candidates"])
    assert session.meta()["confirmed_trials"] == 32
    finished = [e for e in session.iter_events("state") if e["state"] == "finished"]
    assert finished[-1]["confirmed_ms"] == pytest.approx(last["confirmed_ms"])
    # Export compiles with the pick: the database it uses answers with the pick's re-runs.
    from tvmtui.sessions.msdb import tuned_database

    picked = tuned_database(session)[0].query_tuning_record(
        _task_mod(session), _target(session), "main")
    runs = [float(x) for x in picked.run_secs]
    assert len(runs) == last["candidates"][last["pick"]]["runs"]
    assert 1000 * float(np.median(runs)) == pytest.approx(last["confirmed_ms"])

    shown = cli.run("sessions", "show", "a", "--json")
    summary = json.loads(shown.stdout)
    assert SUMMARY_KEYS <= summary.keys() and summary["trials"] == 32
    assert summary["confirmed_ms"] == pytest.approx(last["confirmed_ms"])
    assert summary["tasks"][0]["confirmed_ms"] == pytest.approx(last["confirmed_ms"])
    assert summary["status"] == "finished" and summary["best_ms"] > 0
    listed = json.loads(cli.run("sessions", "list", "--json").stdout)
    assert [(s["name"], s["bundled"]) for s in listed] == [("a", False), ("demo", True)]
    assert SUMMARY_KEYS <= listed[0].keys()

    out = tmp_path / "export"
    exported = cli.run("export", "a", str(out), "--json")
    assert exported.returncode == 0, exported.stderr
    info = json.loads(exported.stdout)
    assert info["confirmed"] is True
    meta = json.loads((out / "model.json").read_text())
    assert meta["graph_hash"] == summary["graph_hash"] and meta["session"] == "a"
    x = np.random.default_rng(0).standard_normal((1, 512, 7, 7)).astype("float32")
    np.testing.assert_allclose(_run_module(info["library"], x), _untuned("conv:C12", x),
                               atol=1e-4, rtol=1e-4)


def test_a_time_budget_ends_the_search_then_confirms_and_resume_can_drop_it(cli):
    tuned = cli.run("tune", "dwconv:D9", "--trials", "100000", "--minutes", "0.25",
                    "--session", "t", "--json", "--variants", "nchw")
    assert tuned.returncode == 0, tuned.stderr
    events = cli.json_lines(tuned.stdout)
    (started,) = [e for e in events if e["event"] == "session_started"]
    assert started["minutes"] == 0.25
    assert started["deadline"] == pytest.approx(started["t"] + 15, abs=5)
    end = events[-1]
    assert end["event"] == "state" and end["state"] == "finished"
    assert end["reason"] == "time budget reached (0.25 min)" and end["t"] >= started["deadline"]
    # The search stopped at its time budget, not its trials, and its best was confirmed.
    trials = [e for e in events if e["event"] == "trial"]
    assert trials and trials[-1]["trial"] < 100000
    assert list(cli.session("t").iter_events("confirmed"))
    view = SessionView()
    for e in events[:3]:
        view.apply(e)
    assert " or until " in view.trials_text()
    shown = json.loads(cli.run("sessions", "show", "t", "--json").stdout)
    assert shown["options"]["minutes"] == 0.25

    n = len(trials)
    resumed = cli.run("resume", "t", "--trials", "4", "--minutes", "0", "--json")
    assert resumed.returncode == 0, resumed.stderr
    again = cli.json_lines(resumed.stdout)
    assert [e["deadline"] for e in again if e["event"] == "session_started"] == [None]
    assert again[-1]["reason"] == "budget reached"
    assert cli.session("t").count_events("trial") == n + 4


def test_a_time_budget_spent_early_still_completes_one_variant(cli):
    """Out of time before every task was measured (here, before the first): the search
    measures the tasks of the variant nearest to complete, then ends; export never builds
    a variant with untuned kernels. NudeNet's 10 minutes ended in its cold pass and its
    export ran 30x slower than the 800-trial session's."""
    tuned = cli.run("tune", "dwconv:D9", "--trials", "100000", "--minutes", "0.01",
                    "--session", "early", "--json")
    assert tuned.returncode == 0, tuned.stderr
    events = cli.json_lines(tuned.stdout)
    assert events[-1]["reason"] == "time budget reached (0.01 min)"
    shown = json.loads(cli.run("sessions", "show", "early", "--json").stdout)
    chosen = shown["variant"]
    assert shown["best_ms"] is not None and shown["variants_ms"][chosen] is not None
    run = [t for t in shown["tasks"] if chosen in t["weights"]]
    assert all(t["best_ms"] is not None for t in run)
    # ... and no more: the other variants' own tasks were never measured.
    assert len(shown["variants_ms"]) > 1
    assert any(t["trials"] == 0 for t in shown["tasks"] if chosen not in t["weights"])


def test_attach_from_a_second_process_sees_every_trial_in_order(cli):
    started = cli.run("tune", "dwconv:D9", "--trials", "32", "--session", "live", "--detach")
    assert started.returncode == 0, started.stderr
    follower = cli.popen("attach", "live", "--json")
    out, err = follower.communicate(timeout=600)
    assert follower.returncode == 0, err
    seen = [e for e in cli.json_lines(out) if e["event"] == "trial"]
    stored = _trials(cli.session("live"))
    assert [e["trial"] for e in seen] == list(range(1, 33))
    assert [e["shash"] for e in seen] == [e["shash"] for e in stored]


def test_kill_9_mid_run_keeps_every_trial_and_resumes(cli):
    started = cli.run("tune", "dwconv:D9", "--trials", "200", "--session", "k", "--detach")
    assert started.returncode == 0, started.stderr
    session = cli.wait_for("k", lambda s: s.count_events("trial") >= 16)
    pid = session.meta()["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 10
    while session.worker_alive() and time.time() < deadline:
        time.sleep(0.1)
    assert session.status() == "crashed"
    # A kill between MetaSchedule's AddToDatabase and the trial event: records with no
    # event. Drop the last three measured trials' events to make that state.
    import sqlite3

    lost = [t for t in _trials(session) if t["run_s"]][-3:]
    with sqlite3.connect(cli.root / "k" / "session.sqlite") as db:
        db.executemany("DELETE FROM events WHERE seq = ?", [(t["seq"],) for t in lost])
    session = cli.session("k")
    before = _trials(session)
    assert len(before) >= 13
    # Simulate a record write cut short by the crash.
    records = session.file(RECORD_DB)
    with open(records, "a") as fh:
        fh.write('[0, [["half a reco')
    shown = json.loads(cli.run("sessions", "show", "k", "--json").stdout)
    assert shown["status"] == "crashed" and shown["trials"] == len(before) + len(lost)

    resumed = cli.run("resume", "k", "--trials", "16", "--json")
    assert resumed.returncode == 0, resumed.stderr
    events = cli.json_lines(resumed.stdout)
    assert any(e["event"] == "notice" and "repaired" in e["message"] for e in events)
    after = _trials(cli.session("k"))
    # (the budget counts the lost trials: resume --trials 16 runs 16 + 3 here)
    assert after[: len(before)] == before and len(after) == len(before) + len(lost) + 16
    assert len({t["shash"] for t in after}) == len(after)
    # The schedules whose events were lost are not measured again.
    assert not {t["shash"] for t in lost} & {t["shash"] for t in after[len(before):]}
    assert any(e["event"] == "notice" and "no trial event" in e["message"] for e in events)


@pytest.mark.slow  # over a minute: `.ci/run` runs `-m slow`
def test_pause_budget_resume_and_stop_from_other_processes(cli):
    # One variant, one task: with several, batches of other tasks already being measured
    # when the budget drops still land (the budget then ends up overshot by them).
    started = cli.run("tune", "dwconv:D9", "--trials", "500", "--session", "c", "--detach",
                      "--variants", "nchw")
    assert started.returncode == 0, started.stderr
    cli.wait_for("c", lambda s: s.meta().get("status") == "running")
    paused = cli.run("pause", "c")
    assert paused.returncode == 0 and "paused" in paused.stdout
    session = cli.session("c")
    assert session.status() == "paused"
    n = session.count_events("trial")
    time.sleep(2)
    assert session.count_events("trial") == n  # nothing measured while paused
    assert cli.run("budget", "c", str(n + 8)).returncode == 0
    resumed = cli.run("resume", "c", "--json")
    assert resumed.returncode == 0, resumed.stderr
    states = [e["state"] for e in cli.json_lines(resumed.stdout) if e["event"] == "state"]
    assert states[0] == "resumed" and states[-1] == "finished"
    assert session.count_events("trial") == n + 8

    detached = cli.popen("resume", "c", "--trials", "400", "--json")
    cli.wait_for("c", lambda s: s.count_events("trial") > n + 8)
    stopped = cli.run("stop", "c")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    detached.communicate(timeout=120)
    assert cli.session("c").status() == "stopped"
    assert cli.run("stop", "c").returncode == 2  # no worker any more: clear error


@pytest.mark.parametrize(
    "args, message",
    [
        (["tune", "missing.onnx"], "not found"),
        (["tune", "conv:C99"], "unknown workload"),
        (["tune", "conv:C1", "--session", "../escape"], "bad session name"),
        (["tune", "conv:C1", "--session", "a/b"], "bad session name"),
        (["tune", "conv:C1", "--trials", "0"], "at least 1"),
        (["tune", "conv:C1", "--minutes", "0"], "--minutes must be a positive number"),
        (["tune", "conv:C1", "--minutes", "nan"], "--minutes must be a positive number"),
        (["resume", "nope", "--minutes", "-1"], "--minutes must be a positive number"),
        (["sessions", "show", "nope"], "no session"),
        (["resume", "nope"], "no session"),
        (["export", "nope", "out"], "no session"),
        (["tune", "conv:C1", "--population", "0"], "--population must be at least 2"),
        (["tune", "conv:C1", "--batch", "0"], "--batch must be at least 1"),
        (["tune", "conv:C1", "--genetic-iters", "-1"], "--genetic-iters must be at least 0"),
        (["tune", "conv:C1", "--cores", "-2"], "--cores must be at least 1"),
        (["tune", "conv:C1", "--target", '{"kind": "nope"}'], "not a target TVM knows"),
        (["resume", "nope", "--transfer-k", "0"], "--transfer-k must be at least 1"),
        (["replay", "demo", "--speed", "nan"], "--speed must be a positive number"),
        (["bench", "conv:C1", "--threads", "0"], "at least 1"),
        (["bench", "conv:C1", "--baselines", ","], "names no baseline"),
        (["bench", "conv:C1", "--baselines", "acl", "--frames", "2"], "none of the baselines"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_touches_nothing(cli, args, message):
    result = cli.run(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr
    assert not cli.root.exists() or not any(cli.root.iterdir())


def test_export_over_a_file_and_a_sessions_path_that_is_a_file(cli, tmp_path):
    existing = tmp_path / "existing"
    existing.write_text("keep me")
    cli.root.mkdir(parents=True)
    (cli.root / "x").mkdir()  # not a session: export must refuse before touching the file
    result = cli.run("export", "x", str(existing))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert existing.read_text() == "keep me"
    from tvmtui.sessions.launch import default_name
    from tvmtui.sessions.store import check_name
    from tvmtui.workloads.loader import Workload

    for odd in ("模型", "a..b", "x" * 200, "bad name!@#", "..."):
        check_name(default_name(Workload(odd, "onnx", "", {}, "", b"")))
    as_file = tmp_path / "sessions-file"
    as_file.write_text("")
    result = cli.run("tune", "conv:C1", "--trials", "1", "--sessions-dir", str(as_file))
    assert result.returncode == 2 and "is a file" in result.stderr
    assert as_file.read_text() == ""


def test_not_a_model_and_bad_shape_via_cli(cli, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("just some notes, not a model\n")
    result = cli.run("tune", str(text))
    assert result.returncode == 2 and "ONNX" in result.stderr
    result = cli.run("tune", "conv:C1", "--shape", "input=1xzz")
    assert result.returncode == 2 and "--shape" in result.stderr
    corrupt = cli.root / "broken"
    corrupt.mkdir(parents=True)
    (corrupt / "session.sqlite").write_bytes(b"garbage" * 50)
    result = cli.run("resume", "broken")
    assert result.returncode == 2 and "corrupted" in result.stderr
    assert (corrupt / "session.sqlite").read_bytes() == b"garbage" * 50


def _mlp(path, rng):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w1 = rng.standard_normal((64, 128)).astype(np.float32)
    b1 = rng.standard_normal((128,)).astype(np.float32)
    w2 = rng.standard_normal((128, 10)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["h3"]),
        helper.make_node("MatMul", ["h3", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
        initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                     numpy_helper.from_array(w2, "w2")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return lambda x: np.maximum(x @ w1 + b1, 0) @ w2


def test_user_onnx_with_two_tasks_keeps_the_budget_and_exports_correct_code(cli, tmp_path):
    rng = np.random.default_rng(7)
    model = tmp_path / "mlp.onnx"
    reference = _mlp(model, rng)
    result = cli.run("tune", str(model), "--shape", "x=4x64", "--trials", "24",
                     "--session", "mlp", "--json")
    assert result.returncode == 0, result.stderr
    events = cli.json_lines(result.stdout)
    tasks = next(e for e in events if e["event"] == "tasks_extracted")["tasks"]
    assert len(tasks) == 2
    trials = [e for e in events if e["event"] == "trial"]
    assert len(trials) == 24  # both tasks' batches were in flight at once; no overshoot
    assert {t["task"] for t in trials} == {0, 1}
    # Revision 10: the weights are layout-free, and schedules store them in the order they
    # read them (RewriteLayout's preprocessing block, folded into the constant at export).
    records = cli.session("mlp").file(RECORD_DB).read_text()
    assert records.count("layout_rewrite_preproc") >= 12
    exported = cli.run("export", "mlp", str(tmp_path / "mlp.so"), "--json")
    assert exported.returncode == 0, exported.stderr
    x = rng.standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_allclose(_run_module(str(tmp_path / "mlp.so"), x), reference(x),
                               rtol=1e-4, atol=1e-4)


def test_a_build_slower_than_ten_times_the_slowest_recent_ones_is_given_up_sooner():
    """The builder's timeout is the configured one until it has seen 16 builds, then ten
    times the slowest tenth of them (at least TIMEOUT_FLOOR_S): one candidate that made
    LLVM run for a minute had held a build process for the whole 60 s."""
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from tvmtui.tuning.builder import TIMEOUT_FLOOR_S, PersistentBuilder

    a = te.placeholder((64,), name="a")
    b = te.compute((64,), lambda i: a[i] + 1.0, name="b")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b])})
    builder = PersistentBuilder(max_workers=2, timeout_sec=60.0)
    try:
        assert builder.batch_timeout() == 60.0
        target = tvm.target.Target({"kind": "llvm"})
        results = builder.build([BuilderInput(mod, target) for _ in range(16)])
        assert all(r.error_msg is None for r in results), results[0].error_msg
        assert len(builder.recent) == 16 and max(builder.recent) < TIMEOUT_FLOOR_S / 10
        assert builder.batch_timeout() == TIMEOUT_FLOOR_S
        builder.recent.extend([5.0] * 16)  # builds of 5 s: 50 s, still under the cap
        assert builder.batch_timeout() == pytest.approx(50.0)
    finally:
        builder.shutdown()
