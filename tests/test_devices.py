"""Devices: the local target and fingerprint, a real RPC tracker with two real servers on
127.0.0.1 (a farm), a board lost mid-run, the transfer path, and bad device input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from tvmtui.devices.local import local_gpus

from .rpc_farm import Farm, free_port, standalone_server


@pytest.fixture
def farm(tmp_path):
    farm = Farm(tmp_path).start()
    yield farm
    farm.stop()


def _trials(cli, name: str) -> list[dict]:
    session = cli.session(name)
    trials = list(session.iter_events("trial"))
    session.close()
    return trials


def test_devices_local_json(cli):
    out = cli.run("devices", "--json")
    assert out.returncode == 0, out.stderr
    local = json.loads(out.stdout)["local"]
    target = local["target"]
    assert target["kind"] == "llvm" and target["mcpu"] not in ("", "native")
    assert target["num-cores"] >= 1 and "mtriple" in target
    fp = local["fingerprint"]
    for key in ("id", "arch", "vendor", "model_name", "cores", "caches", "isa", "kernel",
                "llvm", "tvm"):
        assert key in fp
    assert fp["cores"] == target["num-cores"]
    again = json.loads(cli.run("devices", "--json").stdout)["local"]["fingerprint"]["id"]
    assert again == fp["id"]  # stable
    table = cli.run("devices")
    assert table.returncode == 0 and fp["id"] in table.stdout


@pytest.mark.slow  # over a minute: `.ci/run` runs `-m slow`
def test_farm_spreads_trials_survives_a_lost_board_and_resumes(cli, farm):
    first = farm.add_server("cpu")
    second = farm.add_server("cpu")
    listed = json.loads(cli.run("devices", "--tracker", farm.tracker, "--json").stdout)
    assert listed["tracker"]["keys"]["cpu"]["total"] == 2
    assert listed["tracker"]["keys"]["cpu"]["free"] == 2
    assert listed["tracker"]["keys"]["cpu"]["pending"] == 0

    device = f"tracker://{farm.tracker}/cpu"
    # The farm is under test, not the variants: the stock graph's one task keeps it short.
    proc = cli.popen("tune", "conv:C12", "--trials", "80", "--session", "farm", "--json",
                     "--device", device, "--variants", "nchw")
    # Once some trials are in, kill the second board the moment it opens a session.
    cli.wait_for("farm", lambda s: s.count_events("trial") >= 16, timeout=300)
    seen = farm.server_log(second).count("start serving")
    deadline = time.time() + 120
    while farm.server_log(second).count("start serving") == seen and time.time() < deadline:
        time.sleep(0.02)
    farm.kill_server(second)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert cli.json_lines(out)[-1]["state"] == "finished"

    trials = _trials(cli, "farm")
    assert len(trials) == 80
    by_server = Counter(t["device"] for t in trials if not t["error_kind"])
    assert by_server[f"127.0.0.1:{first}"] > 0 and by_server[f"127.0.0.1:{second}"] > 0
    lost = [t for t in trials if t["error_kind"] == "device_lost"]
    assert lost, Counter(t["error_kind"] for t in trials)
    assert all(t["device"] in (None, f"127.0.0.1:{second}") for t in lost)
    late = [t for t in trials if not t["error_kind"] and t["trial"] > lost[-1]["trial"]]
    assert late and all(t["device"] == f"127.0.0.1:{first}" for t in late)

    # The session resumes on the surviving board; numbering continues, nothing re-measured.
    out = cli.run("resume", "farm", "--trials", "16", "--json")
    assert out.returncode == 0, out.stderr
    trials = _trials(cli, "farm")
    assert [t["trial"] for t in trials] == list(range(1, 97))
    fresh = trials[80:]
    assert all(t["device"] == f"127.0.0.1:{first}" for t in fresh if not t["error_kind"])
    hashes = [t["shash"] for t in trials]
    assert len(hashes) == len(set(hashes))


@pytest.mark.slow  # over a minute: `.ci/run` runs `-m slow`
def test_a_tracker_gone_mid_tune_stops_it_and_resume_measures_what_never_ran(cli, farm):
    """Boards unreachable: the worker stops (budget kept) instead of spending the budget on
    trials that cannot run, and resume measures the candidates that never ran."""
    board = farm.add_server("cpu")
    proc = cli.popen("tune", "dwconv:D9", "--trials", "96", "--batch", "16", "--session", "gone",
                     "--json", "--device", f"tracker://{farm.tracker}/cpu", "--variants", "nchw")
    cli.wait_for("gone", lambda s: s.count_events("trial") >= 8, timeout=300)
    farm.kill_tracker()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err  # not a stop the user asked for: scripts must see it
    assert err.strip().splitlines()[-1].startswith("tvmtui: tuning 'gone' stopped: the device")
    final = cli.json_lines(out)[-1]
    assert final["state"] == "stopped" and final["device_lost"], final
    assert "stopped answering" in final["reason"] and "tvmtui resume gone" in final["reason"]
    trials = _trials(cli, "gone")
    assert len(trials) < 96  # the rest of the budget is kept
    lost = [t for t in trials if t["error_kind"] == "device_lost"]
    assert lost and len(lost) <= 32  # it stopped at the first batch that found nobody

    farm.kill_server(board)
    farm.start(port=farm.tracker_port)  # the tracker's machine is back
    farm.add_server("cpu")
    out = cli.run("resume", "gone", "--trials", "16", "--json")
    assert out.returncode == 0, out.stderr
    trials = _trials(cli, "gone")
    ran = [t["shash"] for t in trials if t["run_s"]]
    assert len(ran) > len([t for t in trials[:-16] if t["run_s"]])
    assert len(ran) == len(set(ran))  # nothing that ran was measured twice


def test_single_rpc_server(cli, tmp_path):
    proc, port = standalone_server(tmp_path)
    try:
        out = cli.run("tune", "dwconv:D9", "--trials", "8", "--session", "one", "--json",
                      "--device", f"rpc://127.0.0.1:{port}")
        assert out.returncode == 0, out.stderr
        trials = _trials(cli, "one")
        assert len(trials) == 8
        assert all(t["device"] == f"127.0.0.1:{port}" for t in trials if not t["error_kind"])
        assert any(not t["error_kind"] for t in trials)
        assert cli.session("one").meta()["device"]["kind"] == "rpc"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_transfer_on_a_different_chip(cli):
    # One variant: one task, so the counts below are exact.
    out = cli.run("tune", "dwconv:D9", "--trials", "16", "--session", "chip", "--json",
                  "--variants", "nchw")
    assert out.returncode == 0, out.stderr
    original = cli.session("chip").meta()["fingerprint"]
    cli.env["TVMTUI_FAKE_FINGERPRINT"] = "stepping=99"

    refused = cli.run("resume", "chip", "--trials", "8")
    assert refused.returncode == 2
    assert "another chip" in refused.stderr and "--transfer" in refused.stderr
    assert "stepping" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert len(_trials(cli, "chip")) == 16  # nothing ran

    out = cli.run("resume", "chip", "--trials", "8", "--transfer", "--transfer-k", "4", "--json")
    assert out.returncode == 0, out.stderr
    trials = _trials(cli, "chip")
    remeasured = [t for t in trials if t.get("remeasured")]
    assert [t["trial"] for t in remeasured] == [17, 18, 19, 20]
    assert all(t["run_s"] for t in remeasured)
    assert not any(t.get("remeasured") for t in trials[20:])
    meta = cli.session("chip").meta()
    assert meta["fingerprint"]["id"] != original["id"]
    assert meta["fingerprint"]["stepping"] == "99"
    assert meta["transfer"]["pending"] is False
    assert meta["transfer"]["from"]["id"] == original["id"]
    aside = cli.root / "chip" / f"database_tuning_record.{original['id']}.json"
    assert aside.exists() and len(aside.read_text().splitlines()) == 16
    # Only re-measured and newly measured records are trusted on this chip.
    records = (cli.root / "chip" / "database_tuning_record.json").read_text().splitlines()
    assert len(records) == 8
    # On the new chip, resuming needs no transfer any more.
    again = cli.run("resume", "chip", "--trials", "4", "--json")
    assert again.returncode == 0, again.stderr
    # Worker, CLI and app fold trials with one reducer: the best shown is the best measured
    # on this chip (trials from 17 on), not the old chip's.
    trials = _trials(cli, "chip")
    here = [sum(t["run_s"]) / len(t["run_s"]) for t in trials if t["trial"] >= 17 and t["run_s"]]
    shown = json.loads(cli.run("sessions", "show", "chip", "--json").stdout)
    (task,) = shown["tasks"]
    assert task["trials"] == len(trials) == 28
    assert task["best_ms"] == pytest.approx(min(here) * 1000)
    worker_best = [e for e in cli.session("chip").iter_events("round_done")][-1]["best_ms"]
    assert worker_best == pytest.approx(task["best_ms"])


def test_bad_device_input(cli, farm):
    dead = free_port()
    for args, words in [
        (("devices", "--tracker", f"127.0.0.1:{dead}"), "cannot reach the RPC tracker"),
        (("devices", "--tracker", "nonsense"), "bad tracker address"),
        (("tune", "dwconv:D9", "--device", f"tracker://127.0.0.1:{dead}/cpu"),
         "cannot reach the RPC tracker"),
        (("tune", "dwconv:D9", "--device", "tracker://127.0.0.1"), "bad --device"),
        (("tune", "dwconv:D9", "--device", f"tracker://{farm.tracker}/nokey"),
         "no server is registered under key 'nokey'"),
        (("tune", "dwconv:D9", "--device", "gpu7x"), "bad --device"),
    ] + ([] if local_gpus() else [(("tune", "dwconv:D9", "--device", "cuda:0"),
                                   "no CUDA GPU 0 here")]):
        out = cli.run(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    # A board whose TVM differs from the host's.
    farm.add_server("old", {"TVMTUI_FAKE_FINGERPRINT": "tvm=0.26.0"})
    out = cli.run("tune", "dwconv:D9", "--device", f"tracker://{farm.tracker}/old")
    assert out.returncode == 2
    assert "runs TVM 0.26.0" in out.stderr and "install apache-tvm==" in out.stderr
    assert not (cli.root).exists() or not any(cli.root.iterdir())


def _listening(port: int) -> list[str]:
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
    return [line.split()[3] for line in out.splitlines() if line.split()[3].endswith(f":{port}")]


def test_board_server_defaults_to_loopback_and_sigterm_stops_serving(tmp_path):
    """TVM's RPC runs uploaded code unauthenticated: the default address is 127.0.0.1, and
    SIGTERM (what systemd and kill send) stops TVM's listening child too."""
    import psutil

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tvmtui.devices.server", "--port", str(port),
                             "--port-end", str(port + 1)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not _listening(port) and time.time() < deadline:
            time.sleep(0.2)
        assert _listening(port) == [f"127.0.0.1:{port}"]
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children  # TVM serves from a child process
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        psutil.wait_procs(children, timeout=10)
        assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
        assert _listening(port) == []
    finally:
        if proc.poll() is None:
            proc.kill()
    _, err = proc.communicate(timeout=10)
    assert "WARNING" not in err  # nothing exposed, nothing to warn about


def test_a_faked_fingerprint_says_so():
    from tvmtui.devices.fingerprint import fake_fingerprint, local_fingerprint

    real = local_fingerprint()
    fake = fake_fingerprint(real, "stepping=99")
    assert fake.id != real.id and "FAKED" in fake.label() and "FAKED" not in real.label()
    assert fake.to_json()["faked"] == "stepping=99"


def test_version_names_the_tvm_llvm_and_chip_it_runs_on():
    from importlib.metadata import version

    import tvmtui
    from tvmtui.devices.fingerprint import local_fingerprint

    out = subprocess.run([sys.executable, "-m", "tvmtui", "--version"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, runtime, chip = out.stdout.splitlines()
    fp = local_fingerprint()
    assert first == f"tvmtui {tvmtui.__version__}" == f"tvmtui {version('tvmtui')}"
    assert runtime.startswith(f"TVM {version('apache-tvm')} (apache-tvm-ffi "
                              f"{version('apache-tvm-ffi')}), LLVM {fp.llvm}, Python ")
    assert chip.startswith(f"chip: {fp.model_name} ({fp.arch}, {fp.cores} cores; ")
    assert chip.endswith(f"fingerprint {fp.id})") and all(f in chip for f in fp.isa)
