"""The paper's comparison for this machine: tuned TVM against every baseline, per workload.

For each workload it tunes a session (or reuses `cmp-<workload>-<trials>` when that
session already reached its budget), runs `tvmtui bench` on it, and writes
benchmarks/results/compare.json (one row per workload and baseline) and compare.md (the
table, plus where the time goes when tuned TVM is slower than the best baseline: each
task's share of the tuned time and its GFLOPS against the CPU's nominal peak).

    python benchmarks/compare.py --trials 256 --net-trials-per-task 48
    python benchmarks/compare.py --workloads conv:C12 --trials 64 --frames 10   # quick
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = "conv:C2,conv:C6,conv:C9,conv:C12,dwconv:D1,dwconv:D9,dqn,dcgan,mobilenet"
NETWORKS = {"resnet18", "mobilenet", "lstm", "dqn", "dcgan"}


def tvmtui(*args: str, sessions: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tvmtui", *args, "--sessions-dir", str(sessions)],
        capture_output=True, text=True,
    )


def nominal_peak_gflops() -> tuple[float, str]:
    """Cores x base clock x FP32 FLOPs per cycle from the ISA (2 FMA pipes assumed)."""
    import os

    info = Path("/proc/cpuinfo").read_text()
    mhz = re.search(r"cpu MHz\s*:\s*([\d.]+)", info)
    flags = re.search(r"^(flags|Features)\s*:(.*)$", info, re.M)
    flags = set(flags.group(2).split()) if flags else set()
    per_cycle = 64 if "avx512f" in flags else 32 if "avx2" in flags else 16
    ghz = float(mhz.group(1)) / 1000 if mhz else 2.0
    cores = len(os.sched_getaffinity(0))
    return cores * ghz * per_cycle, f"{cores} cores x {ghz:.2f} GHz x {per_cycle} FLOP/cycle"


def task_breakdown(session_dir: Path) -> list[dict]:
    """Per task: weight, FLOPs, best latency, share of the tuned network time, GFLOPS."""
    conn = sqlite3.connect(f"file:{session_dir / 'session.sqlite'}?mode=ro", uri=True)
    rows = conn.execute("SELECT event, data FROM events WHERE event IN "
                        "('tasks_extracted', 'trial')").fetchall()
    tasks: list[dict] = []
    for event, data in rows:
        e = json.loads(data)
        if event == "tasks_extracted" and not tasks:
            tasks = [{"task": t["name"], "weight": t["weight"], "flops": t["flops"],
                      "best_ms": None, "trials": 0} for t in e["tasks"]]
        elif event == "trial" and e["task"] < len(tasks):
            t = tasks[e["task"]]
            t["trials"] += 1
            if not e.get("error_kind") and e.get("run_s"):
                ms = 1000 * sum(e["run_s"]) / len(e["run_s"])
                t["best_ms"] = ms if t["best_ms"] is None else min(t["best_ms"], ms)
    total = sum(t["weight"] * t["best_ms"] for t in tasks if t["best_ms"]) or 1.0
    for t in tasks:
        if t["best_ms"]:
            t["share"] = t["weight"] * t["best_ms"] / total
            t["gflops"] = t["flops"] / t["best_ms"] / 1e6
    return sorted(tasks, key=lambda t: -t.get("share", 0))


def ensure_session(workload: str, trials: int, sessions: Path) -> tuple[str, float]:
    name = "cmp-" + re.sub(r"[^A-Za-z0-9]+", "-", workload) + f"-{trials}"
    shown = tvmtui("sessions", "show", name, "--json", sessions=sessions)
    if shown.returncode == 0:
        info = json.loads(shown.stdout)
        if info["trials"] >= trials and info["status"] in ("finished", "stopped"):
            return name, 0.0
        start = time.time()
        proc = tvmtui("resume", name, "--json", sessions=sessions)
    else:
        start = time.time()
        proc = tvmtui("tune", workload, "--trials", str(trials), "--session", name, "--json",
                      sessions=sessions)
    if proc.returncode != 0:
        raise SystemExit(f"tuning {workload} failed: {proc.stderr.strip()[-400:]}")
    return name, time.time() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default=DEFAULT)
    ap.add_argument("--trials", type=int, default=256, help="trials for a single operator")
    ap.add_argument("--net-trials-per-task", type=int, default=48,
                    help="a network gets this many trials per tuning task")
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--sessions-dir", default=str(HERE / "work" / "compare"))
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    sessions = Path(args.sessions_dir)
    sessions.mkdir(parents=True, exist_ok=True)
    peak, peak_text = nominal_peak_gflops()
    rows, workloads = [], []
    for workload in [w.strip() for w in args.workloads.split(",") if w.strip()]:
        trials = args.trials
        if workload in NETWORKS:
            card = json.loads(subprocess.run(
                [sys.executable, "-m", "tvmtui", "zoo", "show", workload, "--json"],
                capture_output=True, text=True, check=True).stdout)
            trials = args.net_trials_per_task * max(1, int(card.get("tasks") or 1))
        print(f"== {workload}: tuning {trials} trials", flush=True)
        name, tune_s = ensure_session(workload, trials, sessions)
        bench = tvmtui("bench", name, "--json", "--frames", str(args.frames),
                       "--repeats", str(args.repeats), sessions=sessions)
        if bench.returncode != 0:
            raise SystemExit(f"bench {workload} failed: {bench.stderr.strip()[-400:]}")
        report = json.loads(bench.stdout)
        by_name = {b["name"]: b for b in report["baselines"]}
        tuned = by_name["tvm-tuned"]
        info = json.loads(tvmtui("sessions", "show", name, "--json", sessions=sessions).stdout)
        flops = info["workload_info"].get("flops")
        for b in report["baselines"]:
            if b["name"] == "tvm-tuned" or not b["available"]:
                continue
            rows.append({
                "workload": workload,
                "baseline": b["name"],
                "median_ms": b["median_ms"],
                "iqr_ms": b["iqr_ms"],
                "tvm_ms": tuned["median_ms"],
                "speedup": b["speedup"] if b["speedup"] is not None else b["speedup_unchecked"],
                "parity_passed": b["parity"]["passed"],
                "max_rel_err": b["parity"]["max_rel_err"],
                "trials": report["tuned_trials"],
                "runtime": b["detail"],
            })
        competitors = [r for r in rows if r["workload"] == workload and r["baseline"] != "tvm-untuned"]
        best = min(competitors, key=lambda r: r["median_ms"]) if competitors else None
        summary = {
            "workload": workload, "session": name, "trials": report["tuned_trials"],
            "tune_s": round(tune_s, 1), "bench_s": report["seconds"], "flops": flops,
            "tvm_ms": tuned["median_ms"],
            "tvm_gflops": flops / tuned["median_ms"] / 1e6 if flops else None,
            "best_baseline": best["baseline"] if best else None,
            "best_ms": best["median_ms"] if best else None,
            "best_gflops": flops / best["median_ms"] / 1e6 if flops and best else None,
            "speedup_vs_best": best["speedup"] if best else None,
            "unavailable": {b["name"]: b["reason"] for b in report["baselines"] if not b["available"]},
            "tasks": task_breakdown(sessions / name),
        }
        workloads.append(summary)
        print(f"   tvm {tuned['median_ms']:.3f} ms; best {summary['best_baseline']} "
              f"{summary['best_ms']:.3f} ms; speedup {summary['speedup_vs_best']:.2f}x", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/compare.py " + " ".join(sys.argv[1:])
    (out / "compare.json").write_text(json.dumps(
        {"command": command.strip(), "created": time.time(), "peak_gflops": peak,
         "peak": peak_text, "rows": rows, "workloads": workloads}, indent=2) + "\n")
    (out / "compare.md").write_text(markdown(rows, workloads, peak, peak_text, command))
    print(f"wrote {out / 'compare.json'} and {out / 'compare.md'}")


def markdown(rows: list[dict], workloads: list[dict], peak: float, peak_text: str,
             command: str) -> str:
    lines = [
        "# Tuned TVM against the baselines on this machine", "",
        f"`{command.strip()}`; nominal FP32 peak {peak:.0f} GFLOPS ({peak_text}, base clock).",
        "Speedup = baseline median / tuned TVM median; a speedup whose parity check failed "
        "is marked, never counted as a win.", "",
        "| workload | trials | tuned TVM ms | TVM GFLOPS | baseline | baseline ms | speedup | parity |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for w in workloads:
        for r in [r for r in rows if r["workload"] == w["workload"]]:
            sp = f"{r['speedup']:.2f}x" if r["speedup"] is not None else "-"
            if not r["parity_passed"]:
                sp += " (parity FAILED)"
            gf = f"{w['tvm_gflops']:.0f}" if w["tvm_gflops"] else "-"
            lines.append(f"| {w['workload']} | {r['trials']} | {r['tvm_ms']:.3f} | {gf} | "
                         f"{r['baseline']} | {r['median_ms']:.3f} | {sp} | "
                         f"{'ok' if r['parity_passed'] else 'FAIL'} {r['max_rel_err']:.1e} |")
    lines += ["", "## Against the best baseline", "",
              "| workload | best baseline | its GFLOPS | tuned TVM GFLOPS | speedup |",
              "|---|---|---|---|---|"]
    for w in workloads:
        bg = f"{w['best_gflops']:.0f}" if w["best_gflops"] else "-"
        tg = f"{w['tvm_gflops']:.0f}" if w["tvm_gflops"] else "-"
        sp = f"{w['speedup_vs_best']:.2f}x" if w["speedup_vs_best"] is not None else "-"
        lines.append(f"| {w['workload']} | {w['best_baseline']} | {bg} | {tg} | {sp} |")
    slow = [w for w in workloads if (w["speedup_vs_best"] or 0) < 1.0]
    if slow:
        lines += ["", "## Where the time goes (workloads where tuned TVM is slower)", ""]
        for w in slow:
            lines.append(f"**{w['workload']}** ({w['trials']} trials):")
            lines.append("")
            lines.append("| task | weight | trials | best ms | share | GFLOPS | % of peak |")
            lines.append("|---|---|---|---|---|---|---|")
            for t in w["tasks"][:6]:
                if not t.get("best_ms"):
                    continue
                lines.append(f"| {t['task']} | {t['weight']} | {t['trials']} | {t['best_ms']:.3f} | "
                             f"{100 * t['share']:.0f}% | {t['gflops']:.0f} | "
                             f"{100 * t['gflops'] / peak:.0f}% |")
            lines.append("")
    unavailable = {k: v for w in workloads for k, v in w["unavailable"].items() if k != "tvm-tuned"}
    if unavailable:
        lines += ["", "Not available on this machine:", ""]
        lines += [f"- `{k}`: {v}" for k, v in unavailable.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
