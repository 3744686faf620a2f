"""Are `tvmtui bench` timings repeatable? Runs the same bench several times in a row and
reports, per runtime, each run's median and the spread (max - min) / min of the medians.

    python benchmarks/bench_stability.py SESSION [SESSION ...] --runs 3 --frames 10

Prints a table and writes benchmarks/results/bench_stability.json. The issue's bar: two
runs of the same bench within 10% of each other on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sessions", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--sessions-dir", default=str(HERE / "work" / "compare"))
    args = ap.parse_args()
    rows = []
    for name in args.sessions:
        medians: dict[str, list[float]] = {}
        iqrs: dict[str, list[float]] = {}
        for _ in range(args.runs):
            out = subprocess.run(
                [sys.executable, "-m", "tvmtui", "bench", name, "--json", "--no-save",
                 "--frames", str(args.frames), "--sessions-dir", args.sessions_dir],
                capture_output=True, text=True, check=True,
            )
            for b in json.loads(out.stdout)["baselines"]:
                if b["median_ms"] is not None:
                    medians.setdefault(b["name"], []).append(b["median_ms"])
                    iqrs.setdefault(b["name"], []).append(b["iqr_ms"])
        for runtime, values in medians.items():
            spread = (max(values) - min(values)) / min(values)
            rows.append({"session": name, "runtime": runtime, "medians_ms": values,
                         "iqr_ms": iqrs[runtime], "spread": spread})
            print(f"{name:22} {runtime:12} " + " ".join(f"{v:9.4f}" for v in values)
                  + f"   spread {100 * spread:4.1f}%", flush=True)
    worst = max(r["spread"] for r in rows)
    print(f"worst spread {100 * worst:.1f}% over {args.runs} runs")
    command = "python benchmarks/bench_stability.py " + " ".join(sys.argv[1:])
    (HERE / "results" / "bench_stability.json").write_text(json.dumps(
        {"command": command, "created": time.time(), "runs": args.runs, "frames": args.frames,
         "worst_spread": worst, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
