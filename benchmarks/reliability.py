"""Reliability under abuse: kill -9 at random moments of tune and resume, a follower whose
terminal hangs up, a board server killed and a tracker gone mid-tune, and a sessions folder
on a full disk. Reports rounds survived, trials streamed vs stored, schedules measured twice
and sessions left unresumable.

    python benchmarks/reliability.py --rounds 10
    python benchmarks/reliability.py --rounds 2 --trials 24 --no-boards  # tests/test_reliability.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/rpc_farm.py: a real tracker and board servers


def tvmtui(*args: str, root: Path, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, TVMTUI_SESSIONS=str(root))
    return subprocess.run([sys.executable, "-m", "tvmtui", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, **kw)


def trials(root: Path, name: str) -> list[dict]:
    db = root / name / "session.sqlite"
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [dict(json.loads(d), seq=s) for s, d in
                conn.execute("SELECT seq, data FROM events WHERE event = 'trial' ORDER BY seq")]


def worker_pid(root: Path, name: str) -> int | None:
    lock = root / name / "worker.lock"
    try:
        return int(lock.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def kill_round(root: Path, name: str, workload: str, trials_per_run: int, rng: random.Random,
               first: bool) -> dict:
    """Start (or resume) a run, follow it from a second process, SIGHUP the follower and
    kill -9 the worker at a random moment; then check the store."""
    env = dict(os.environ, TVMTUI_SESSIONS=str(root))
    start = (["tune", workload, "--trials", str(trials_per_run), "--session", name,
              "--variants", "nchw"] if first else ["resume", name, "--trials", str(trials_per_run)])
    started = tvmtui(*start, "--detach", root=root)
    if started.returncode != 0:
        return {"ok": False, "why": started.stderr.strip()[-300:]}
    follower = subprocess.Popen([sys.executable, "-m", "tvmtui", "attach", name, "--json"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, start_new_session=True)
    if rng.random() < 0.5:
        time.sleep(rng.uniform(3.0, 20.0))  # at start-up, extraction or the first search
    else:  # while batches are being written: just after this run's first trial event
        before, deadline = len(trials(root, name)), time.time() + 180
        while len(trials(root, name)) == before and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 2.0))
    follower.send_signal(signal.SIGHUP)  # the SSH link drops
    pid = worker_pid(root, name)
    killed = False
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
            killed = True
        except ProcessLookupError:
            pass
    streamed = [json.loads(line) for line in follower.communicate(timeout=60)[0].splitlines()
                if line.strip()]
    time.sleep(1.0)
    stored = trials(root, name)
    stored_keys = {(t["trial"], t.get("shash")) for t in stored}
    streamed_trials = [e for e in streamed if e.get("event") == "trial"]
    lost = [e for e in streamed_trials if (e["trial"], e.get("shash")) not in stored_keys]
    return {"ok": True, "killed": killed, "stored": len(stored), "streamed": len(streamed_trials),
            "lost": len(lost), "measured_twice": measured_twice(stored),
            "_streamed": {(e["trial"], e.get("shash")) for e in streamed_trials}}


def measured_twice(stored: list[dict]) -> int:
    """Schedules that ran more than once (a candidate no board ran may be measured later)."""
    ran = [t["shash"] for t in stored if t.get("shash") and t.get("run_s")]
    return len(ran) - len(set(ran))


def board_round(work: Path, what: str, workload: str, trials_per_run: int,
                rng: random.Random) -> dict:
    """Tune through a real tracker, then kill the board server (`what="server"`) or the
    tracker (`"tracker"`) at a random moment: the run must stop with a clear reason, keep
    every trial, and resume on a fresh board without measuring anything twice."""
    from tests.rpc_farm import Farm

    root = work / f"sessions-{what}"
    logs = work / f"logs-{what}"
    logs.mkdir(exist_ok=True)
    farm = Farm(logs).start()
    try:
        board = farm.add_server("rel")
        device = f"tracker://{farm.tracker}/rel"
        env = dict(os.environ, TVMTUI_SESSIONS=str(root))
        tune = subprocess.Popen([sys.executable, "-m", "tvmtui", "tune", workload, "--trials",
                                 str(trials_per_run), "--session", what, "--variants", "nchw",
                                 "--device", device, "--json"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(8.0, 20.0))
        farm.kill_server(board) if what == "server" else farm.kill_tracker()
        out, err = tune.communicate(timeout=900)
        lines = [json.loads(line) for line in out.splitlines() if line.strip().startswith("{")]
        streamed = [e for e in lines if e.get("event") == "trial"]
        final = lines[-1] if lines else {}
        stored = trials(root, what)
        if what == "tracker":
            farm.start(port=farm.tracker_port)
        farm.add_server("rel")
        resumed = tvmtui("resume", what, "--trials", "8", "--json", root=root, timeout=900)
        after = trials(root, what)
        # A lost board stops the tune with exit 1 and says so (the budget is not spent).
        return {"ok": tune.returncode == 1 and bool(final.get("device_lost")), "what": what,
                "state": final.get("state"),
                "reason": (final.get("reason") or err.strip()[-200:])[:200],
                "streamed": len(streamed), "stored": len(stored),
                "lost": len(streamed) - len({(t["trial"], t.get("shash")) for t in stored}
                                            & {(t["trial"], t.get("shash")) for t in streamed}),
                "budget_kept": len(stored) < trials_per_run,
                "resumable": resumed.returncode == 0 and len(after) > len(stored),
                "measured_twice": measured_twice(after)}
    finally:
        farm.stop()


def full_disk(root_parent: Path, workload: str) -> dict:
    """A sessions folder on a 2 MB tmpfs: the error must say the disk is full."""
    mount = root_parent / "tiny"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        return {"skipped": f"cannot mount a tmpfs here: {made.stderr.strip()[:120]}"}
    try:
        (mount / "filler").write_bytes(b"\0" * (2 * 1024 * 1024 - 64 * 1024))
        out = tvmtui("tune", workload, "--trials", "4", "--session", "full", "--variants", "nchw",
                     "--json", root=mount / "sessions", timeout=300)
        message = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
        return {"exit": out.returncode, "message": message[:300],
                "clear": "disk" in message.lower() or "space" in message.lower()}
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=48, help="trials each run asks for")
    ap.add_argument("--workload", default="dwconv:D9")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(HERE / "results" / "reliability.json"))
    ap.add_argument("--no-boards", action="store_true",
                    help="skip the killed-server and gone-tracker rounds (tests/test_devices.py has them)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="tvmtui-reliability-"))
    root = work / "sessions"
    rounds = []
    try:
        for i in range(args.rounds):
            rounds.append(kill_round(root, "rel", args.workload, args.trials, rng, first=i == 0))
            shown = {k: v for k, v in rounds[-1].items() if not k.startswith("_")}
            print(f"round {i + 1}: {shown}", flush=True)
        final = tvmtui("resume", "rel", "--trials", "4", "--json", root=root)
        resumable = final.returncode == 0
        shown = json.loads(tvmtui("sessions", "show", "rel", "--json", root=root).stdout or "{}")
        boards = []
        for what in () if args.no_boards else ("server", "tracker"):
            boards.append(board_round(work, what, args.workload, args.trials * 2, rng))
            print(f"board {what}: {boards[-1]}", flush=True)
        disk = full_disk(work, args.workload)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "command": "python benchmarks/reliability.py " + " ".join(sys.argv[1:]),
        "rounds": len(rounds),
        "survived": sum(1 for r in rounds if r.get("ok")),
        "killed": sum(1 for r in rounds if r.get("killed")),
        # distinct trials any follower saw (each follower replays the session from its start)
        "trials_streamed": len(set().union(*(r.pop("_streamed", set()) for r in rounds))),
        "trials_stored": shown.get("trials"),
        "streamed_but_lost": sum(r.get("lost", 0) for r in rounds + boards),
        "measured_twice": max((r.get("measured_twice", 0) for r in rounds + boards), default=0),
        "resumable_at_end": resumable and all(b.get("resumable") for b in boards),
        "boards": boards,
        "full_disk": disk,
        "rounds_detail": rounds,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "rounds_detail"}, indent=2))


if __name__ == "__main__":
    main()
