"""Reliability under abuse: kill -9 at random moments of tune and resume, a follower whose
terminal hangs up, and a sessions folder on a full disk. Reports rounds survived, trials
streamed vs stored, schedules measured twice and sessions left unresumable.

    python benchmarks/reliability.py --rounds 10
    python benchmarks/reliability.py --rounds 2 --trials 24      # the short version (a test)
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


def tvmtui(*args: str, root: Path, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, TVMTUI_SESSIONS=str(root))
    return subprocess.run([sys.executable, "-m", "tvmtui", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, **kw)


def trials(root: Path, name: str) -> list[dict]:
    db = root / name / "session.sqlite"
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
    time.sleep(rng.uniform(3.0, 20.0))
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
    shashes = [t["shash"] for t in stored if t.get("shash")]
    return {"ok": True, "killed": killed, "stored": len(stored), "streamed": len(streamed_trials),
            "lost": len(lost), "measured_twice": len(shashes) - len(set(shashes))}


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
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="tvmtui-reliability-"))
    root = work / "sessions"
    rounds = []
    try:
        for i in range(args.rounds):
            rounds.append(kill_round(root, "rel", args.workload, args.trials, rng, first=i == 0))
            print(f"round {i + 1}: {rounds[-1]}", flush=True)
        final = tvmtui("resume", "rel", "--trials", "4", "--json", root=root)
        resumable = final.returncode == 0
        shown = json.loads(tvmtui("sessions", "show", "rel", "--json", root=root).stdout or "{}")
        disk = full_disk(work, args.workload)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "command": "python benchmarks/reliability.py " + " ".join(sys.argv[1:]),
        "rounds": len(rounds),
        "survived": sum(1 for r in rounds if r.get("ok")),
        "killed": sum(1 for r in rounds if r.get("killed")),
        "trials_streamed": sum(r.get("streamed", 0) for r in rounds),
        "trials_stored": shown.get("trials"),
        "streamed_but_lost": sum(r.get("lost", 0) for r in rounds),
        "measured_twice": max((r.get("measured_twice", 0) for r in rounds), default=0),
        "resumable_at_end": resumable,
        "full_disk": disk,
        "rounds_detail": rounds,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "rounds_detail"}, indent=2))


if __name__ == "__main__":
    main()
