import json
import subprocess
import sys
import time

import pytest

from tvmtui.core.errors import UserError
from tvmtui.sessions.catalog import list_sessions
from tvmtui.sessions.msdb import repair_json_lines
from tvmtui.sessions.store import Session, check_name

META = {"workload": {"name": "w", "graph_hash": "h"}, "target": {"kind": "llvm"}, "budget": 4,
        "status": "finished"}


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden", "", "x" * 81, "a..b"])
def test_session_names_that_could_escape_are_refused(name):
    with pytest.raises(UserError, match="bad session name"):
        check_name(name)


def test_events_and_commands_round_trip(tmp_path):
    s = Session.create(tmp_path, "s", META)
    s.append("trial", {"task": 0, "trial": 1})
    s.append_many([("trial", {"task": 0, "trial": 2}), ("round_done", {"trials": 2})],
                  meta={"trials": 2})
    events = s.events(0)
    assert [e["event"] for e in events] == ["trial", "trial", "round_done"]
    assert all("t" in e for e in events) and events[1]["trial"] == 2
    assert s.events(events[1]["seq"])[0]["event"] == "round_done"
    s.send("budget", 10)
    assert s.commands(0)[-1][1:] == ("budget", 10)
    assert s.meta()["trials"] == 2


WRITER = """
import sys, time
from pathlib import Path
from tvmtui.sessions.store import Session
s = Session.open(Path(sys.argv[1]), "live")
for i in range(1, 301):
    s.append("trial", {"trial": i})
    if i % 50 == 0:
        time.sleep(0.05)
s.set_meta(status="finished")
"""


def test_a_reader_in_another_process_sees_every_event_in_order(tmp_path):
    s = Session.create(tmp_path, "live", dict(META, status="running"))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)])
    seen, seq = [], 0
    while True:
        new = s.events(seq)
        for e in new:
            seq = e["seq"]
            seen.append(e["trial"])
        if writer.poll() is not None and not s.events(seq):
            break
    assert writer.returncode == 0
    assert seen == list(range(1, 301))


def test_a_corrupted_session_is_reported_not_raised(tmp_path):
    Session.create(tmp_path, "good", META)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "session.sqlite").write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(UserError, match="corrupted"):
        Session.open(tmp_path, "bad")
    found, broken = list_sessions(tmp_path)
    assert [(s.name, s.bundled) for s in found] == [("good", False), ("demo", True)]
    assert broken and broken[0][0] == "bad"


def test_repair_drops_a_line_cut_short_and_keeps_the_original(tmp_path):
    path = tmp_path / "database_tuning_record.json"
    good = [json.dumps([0, [["a"], [1.0]]]), json.dumps([0, [["b"], [2.0]]])]
    path.write_text("\n".join(good) + "\n" + good[0][:17])
    assert repair_json_lines(path) == 1
    assert path.read_text().splitlines() == good
    assert (tmp_path / "database_tuning_record.json.broken").exists()
    assert repair_json_lines(path) == 0
    first = (tmp_path / "database_tuning_record.json.broken").read_bytes()
    path.write_text("\n".join(good) + "\n" + good[1][:9])  # a second crash, later
    assert repair_json_lines(path) == 1
    assert (tmp_path / "database_tuning_record.json.broken").read_bytes() == first
    assert (tmp_path / "database_tuning_record.json.broken.1").read_bytes().endswith(
        good[1][:9].encode())


def test_readers_never_take_the_worker_lock(tmp_path):
    """A reader asking "is a worker alive?" over and over must never make a worker that is
    starting at that moment fail to take its lock (it would exit "already has a worker")."""
    import fcntl
    import threading

    from tvmtui.sessions.store import lock_held

    lock = tmp_path / "worker.lock"
    lock.write_text("")
    stop = threading.Event()
    answers = []

    def reader():
        while not stop.is_set():
            answers.append(lock_held(lock))

    thread = threading.Thread(target=reader)
    thread.start()
    refused, attempts = 0, 0
    deadline = time.monotonic() + 60
    try:
        # At least 2000 attempts, and on until the reader has asked often alongside them: on
        # a busy machine the reader thread may not run at all during the first 2000.
        while attempts < 2000 or (len(answers) <= 100 and time.monotonic() < deadline):
            attempts += 1
            with open(lock, "a+") as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    refused += 1
                    continue
                fcntl.flock(fh, fcntl.LOCK_UN)
    finally:
        stop.set()
        thread.join()
    assert refused == 0 and len(answers) > 10
    with open(lock, "a+") as held:  # and a held lock is seen
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert lock_held(lock)
    assert not lock_held(lock)


@pytest.mark.slow  # over a minute: `.ci/run` runs `-m slow`
def test_a_record_that_does_not_replay_is_left_out_not_fatal(cli, tmp_path):
    """TVM replays every record's trace as it loads a database and refuses the whole file
    when one fails (MobileNet's rfactor pooling schedules did). Export builds from the
    other records and says so; resume moves the line aside, kept, and tunes on."""
    import json

    from tests.test_variants import conv_net

    model = tmp_path / "conv.onnx"
    # Two convs: two tasks (a lone one's layout transforms run inside it, one task).
    model.write_bytes(conv_net([(16, 3, 1), (16, 3, 1)], (1, 16, 9, 9)))
    run = cli.run("tune", str(model), "--trials", "10", "--session", "r", "--json",
                  "--variants", "nchwc", "--batch", "4")
    assert run.returncode == 0, run.stderr
    folder = cli.root / "r"
    records = folder / "database_tuning_record.json"
    lines = records.read_bytes().splitlines()
    workloads = len((folder / "database_workload.json").read_bytes().splitlines())
    assert workloads >= 2
    # The conv's record pointed at another workload: its trace cannot replay there.
    index, record = json.loads(lines[-1])
    bad = json.dumps([(index + 1) % workloads, record]).encode()
    records.write_bytes(b"".join(line + b"\n" for line in [*lines, bad]))

    out = tmp_path / "lib"
    exported = cli.run("export", "r", str(out), "--json")
    assert exported.returncode == 0, exported.stderr
    assert any("1 tuning record(s) left out" in n for n in json.loads(exported.stdout)["notes"])
    assert records.read_bytes().splitlines()[-1] == bad  # export leaves the files alone

    resumed = cli.run("resume", "r", "--trials", "12", "--json")
    assert resumed.returncode == 0, resumed.stderr
    notices = [e["message"] for e in cli.json_lines(resumed.stdout) if e["event"] == "notice"]
    assert any(m.startswith("1 tuning record(s) set aside") for m in notices), notices
    assert (folder / "database_tuning_record.json.unreplayable").read_bytes() == bad + b"\n"
    kept = records.read_bytes().splitlines()
    assert bad not in kept and set(lines) <= set(kept)


def _small_database(folder):
    """A session's MetaSchedule JSON files with 3 real records of a 64x64 matmul."""
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.devices.local import local_cpu_target
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(local_cpu_target())
    a, b = te.placeholder((64, 64), name="A"), te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    paths = folder / "database_workload.json", folder / "database_tuning_record.json"
    db = ms.database.JSONDatabase(str(paths[0]), str(paths[1]), module_equality="structural")
    workload = db.commit_workload(mod)
    ctx = ms.TuneContext(mod=mod, target=tvm.target.Target(local_cpu_target()),
                         space_generator="post-order-apply", task_name="mm", rand_state=3)
    for seconds, design in zip((1e-4, 2e-4, 3e-4), ctx.generate_design_space()):
        db.commit_tuning_record(ms.database.TuningRecord(design.trace, workload, [seconds]))
    return paths


def test_a_database_that_loads_only_record_by_record_is_rewritten_and_kept(tmp_path):
    """TVM loads a JSON database by replaying its records in parallel, which failed on
    every try for a finished MobileNet session whose records each replayed alone: its
    worker now writes the files afresh from the records replayed one by one. Cut short,
    the old files (kept as *.reloading) are restored at the next open."""
    from tvmtui.sessions import msdb

    workloads, records = _small_database(tmp_path)
    before = sorted(records.read_bytes().splitlines())
    good, bad = msdb._replayable(workloads, records)
    assert len(good) == 3 and not bad
    db = msdb._rewritten(workloads, records, good)
    assert len(db) == 3 and sorted(records.read_bytes().splitlines()) == before
    assert not list(tmp_path.glob("*.reloading"))
    # A rewrite cut short: the old files aside, a new one half written.
    for path in (workloads, records):
        path.replace(path.with_name(path.name + ".reloading"))
    records.write_bytes(before[0] + b"\n")
    workloads.write_bytes(b"")
    db, moved, _ = msdb.open_own_database(workloads, records)
    assert moved == 0 and len(db) == 3
    assert sorted(records.read_bytes().splitlines()) == before
    assert not list(tmp_path.glob("*.reloading"))
