"""UI benchmark: keypress-to-repaint latency and memory while events stream in.

A writer process plays the part of a tuning worker (it holds the session lock and appends
trial events shaped like the bundled demo's, with a round_done every 16 trials) at --rate
events per second for --seconds. The real app follows that session on its live screen
(headless, 80x24) while a tab key is pressed every 0.5 s. Each press is timed from the key
event being posted to the first frame the app hands to its driver that shows the new tab
(the app's `_display` call, which is what writes to the terminal). RSS is sampled every 5 s.
Prints a table and writes benchmarks/results/ui_latency.json.

    python benchmarks/ui_latency.py --rate 50 --seconds 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent

WRITER = r"""
import fcntl, sys, time
from pathlib import Path
from tvmtui.core.paths import assets_dir
from tvmtui.sessions.store import Session
root, rate, seconds = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
s = Session.open(root, "ui-bench")
lock = open(root / "ui-bench" / "worker.lock", "a+")
fcntl.flock(lock, fcntl.LOCK_EX)
demo = Session.open(assets_dir(), "demo")
trials = [e for e in demo.iter_events("trial")]
for e in trials:
    for k in ("seq", "t", "event"):
        e.pop(k)
s.append("session_started", {"workload": "conv:C2", "graph_hash": "x", "budget": 10**9,
         "target": demo.meta()["target"], "prior_trials": 0, "run": 0, "pid": 0})
s.append("tasks_extracted", {"tasks": [{"index": 0, "name": "conv2d", "flops": 231211008.0, "weight": 1}]})
s.append("state", {"state": "running", "reason": ""})
s.set_meta(status="running")
start, n, best = time.time(), 0, None
while time.time() - start < seconds:
    e = dict(trials[n % len(trials)], trial=n + 1)
    lat = sum(e["run_s"]) / len(e["run_s"]) if e["run_s"] else None
    best = lat if best is None or (lat and lat < best) else best
    batch = [("trial", e)]
    if (n + 1) % 16 == 0:
        batch.append(("round_done", {"trials": n + 1, "budget": 10**9, "best_ms": best * 1e3}))
    s.append_many(batch, meta={"trials": n + 1})
    n += 1
    time.sleep(max(0.0, start + n / rate - time.time()))
s.set_meta(status="finished")
"""


async def drive(root: Path, seconds: float, rate: float) -> dict:
    from tvmtui.core.paths import assets_dir
    from tvmtui.sessions.store import Session
    from tvmtui.tui.app import TvmTuiApp

    demo_meta = Session.open(assets_dir(), "demo").meta()
    Session.create(root, "ui-bench", {k: demo_meta[k] for k in ("workload", "target", "budget")}
                   | {"status": "running"})
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(rate), str(seconds)])
    proc = psutil.Process()
    latencies, rss = [], []
    app = TvmTuiApp(root, start="live", session="ui-bench")
    frames: list[tuple[float, str]] = []  # (time, active tab) of every frame sent out
    original_display = app._display

    def display(screen, renderable):
        original_display(screen, renderable)
        tabs = screen.query("#tabs")
        frames.append((time.perf_counter(), tabs.first().active if tabs else ""))

    app._display = display
    async with app.run_test(size=(80, 24)) as pilot:
        start = time.time()
        keys, tabs, i, last_rss = ["1", "2", "3", "4"], ["tasks", "trials", "charts", "baselines"], 0, 0.0
        while writer.poll() is None:
            frames.clear()
            t0 = time.perf_counter()
            await pilot.press(keys[i % 4])
            await pilot.pause()
            shown = next((t for t, tab in frames if tab == tabs[i % 4]), None)
            if shown is not None:
                latencies.append(shown - t0)
            i += 1
            now = time.time() - start
            if now - last_rss >= 5:
                rss.append((round(now, 1), proc.memory_info().rss / 2**20))
                last_rss = now
            await asyncio.sleep(0.5)
        trials_seen = app.screen.view.trials
    lat = sorted(latencies)
    pick = lambda q: 1000 * lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
    warm = [m for t, m in rss if t >= 30] or [m for _, m in rss]
    return {
        "rate_per_s": rate,
        "seconds": seconds,
        "keypresses": len(lat),
        "p50_ms": pick(0.50),
        "p95_ms": pick(0.95),
        "max_ms": 1000 * lat[-1],
        "trials_seen": trials_seen,
        "rss_mb_at_30s": warm[0],
        "rss_mb_end": rss[-1][1],
        "rss_growth_mb": rss[-1][1] - warm[0],
        "rss_samples": rss,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--seconds", type=float, default=300.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tvmtui-ui-") as tmp:
        result = asyncio.run(drive(Path(tmp), args.seconds, args.rate))
    result["command"] = " ".join(["python", "benchmarks/ui_latency.py", *sys.argv[1:]])
    result["date"] = time.strftime("%Y-%m-%d")
    result["cores"] = os.cpu_count()
    for key in ("keypresses", "p50_ms", "p95_ms", "max_ms", "trials_seen", "rss_mb_at_30s",
                "rss_mb_end", "rss_growth_mb"):
        value = result[key]
        print(f"{key:14} {value:.1f}" if isinstance(value, float) else f"{key:14} {value}")
    dest = HERE / "results" / "ui_latency.json"
    dest.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
