"""Tuning-speed benchmark: tvmtui's worker against stock `ms.relax_integration.tune_relax`.

For one built-in workload and trial budget it measures, for both:
  seconds from start to the first measured trial, trials per minute, the share of time
  lost to builder timeouts, peak memory (RSS of the tuning process and its children),
  the best latency reached, and the seconds until it first measured a trial as fast as
  stock's best of the same seed (time to quality: trials differ in what they cost, a
  Winograd candidate compiled 3-5x longer than a direct conv's before rewrite revision 13,
  1.5-3x since). Each tool runs --repeats
  times with different seeds (best latency after a small budget is noisy); the summary row
  is the median of each column.
Stock runs tune_relax's defaults (search, runner, 64 candidates a round) with one change:
its LocalBuilder's build function skips `import tvm.s_tir.tensor_intrin`, which each fresh
builder process pays (35 s here, against its 30 s timeout: as shipped it builds nothing
on this machine; `--stock-as-shipped` runs it so).
Prints a table and writes benchmarks/results/tuning_speed.json.
`--first-trial W1,W2,...` instead measures, per workload, the seconds from `tvmtui tune`
to its tasks (all variants extracted) and to its first measured trial
(results/first_trial.json); with `--beside DIR`, each in a copy of the sessions folder DIR,
so the reuse scan of other sessions on this chip is in the time
(results/first_trial_beside.json).

    python benchmarks/tuning_speed.py --workload conv:C12 --trials 64 --repeats 3
    python benchmarks/tuning_speed.py --first-trial conv:C12,resnet18,mobilenet,lstm,dqn,dcgan
    python benchmarks/tuning_speed.py --first-trial conv:C3,resnet18 --beside benchmarks/work/compare
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent


class PeakRSS(threading.Thread):
    """Samples the RSS of a process tree every 100 ms and keeps the peak."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            try:
                proc = psutil.Process(self.pid)
                procs = [proc, *proc.children(recursive=True)]
                total = 0
                for p in procs:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                self.peak = max(self.peak, total)
            except psutil.Error:
                pass


def run_tvmtui(workload: str, trials: int, work: Path, seed: int) -> dict:
    start = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tvmtui", "tune", workload, "--trials", str(trials),
         "--session", f"bench{seed}", "--json", "--sessions-dir", str(work), "--seed", str(seed)],
        stdout=subprocess.PIPE, text=True,
    )
    events, sampler = [], None
    for line in proc.stdout:
        e = json.loads(line)
        events.append(e)
        if e["event"] == "session_started" and sampler is None:
            sampler = PeakRSS(e["pid"])
            sampler.start()
    proc.wait()
    if sampler:
        sampler.done.set()
    trials_ev = [e for e in events if e["event"] == "trial"]
    rounds = [e for e in events if e["event"] == "round_done"]
    # Tuning ends with its last round; the confirming that follows (the best records
    # measured again, not trials) is reported on its own.
    end = rounds[-1]["t"] if rounds else events[-1]["t"]
    lost = rounds[-1]["build_timeout_lost_s"] if rounds else 0.0
    return {
        "tool": "tvmtui",
        "first_trial_s": trials_ev[0]["t"] - start if trials_ev else None,
        "trials": len(trials_ev),
        "total_s": end - start,
        "trials_per_min": 60 * len(trials_ev) / (end - start),
        "timeout_share": lost / (end - start),
        "build_errors": sum(1 for e in trials_ev if e["error_kind"] in ("build_error", "build_timeout")),
        "peak_rss_mb": sampler.peak / 2**20 if sampler else None,
        # The end-to-end estimate (a workload's tasks include layout transforms; the
        # fastest single trial would be one of those).
        "best_ms": rounds[-1]["best_ms"] if rounds else None,
        "confirm_s": events[-1]["t"] - end,
        # (seconds from start, ms) of each measured trial: see `_reached`.
        "latencies": [(e["t"] - start, 1000 * sum(e["run_s"]) / len(e["run_s"]))
                      for e in trials_ev if e.get("run_s")],
    }


def first_trial(workload: str, work: Path) -> dict:
    """Seconds from `tvmtui tune` to tasks_extracted and to the first trial; then stop."""
    name = "first-" + "".join(c if c.isalnum() else "-" for c in workload)
    start = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tvmtui", "tune", workload, "--trials", "1000", "--session", name,
         "--json", "--sessions-dir", str(work)], stdout=subprocess.PIPE, text=True)
    row = {"workload": workload, "tasks_s": None, "first_trial_s": None, "tasks": None}
    for line in proc.stdout:
        e = json.loads(line)
        if e["event"] == "tasks_extracted":
            row["tasks_s"], row["tasks"] = e["t"] - start, len(e["tasks"])
            row["variants"] = list(e.get("variants", {}))
        elif e["event"] == "trial":
            # The cold pass starts with the cheapest task: say which one it measured.
            row["first_trial_s"], row["first_task"] = e["t"] - start, e["task_name"]
            subprocess.run([sys.executable, "-m", "tvmtui", "stop", name, "--sessions-dir",
                            str(work)], capture_output=True)
            break
    for _ in proc.stdout:  # drain: a follower blocked on a full pipe would never exit
        pass
    proc.wait()
    return row


def _build_without_intrinsics(mod, target, _params):
    """Stock LocalBuilder's build minus its `import tvm.s_tir.tensor_intrin` (35 s here, in
    every fresh builder process, against a 30 s timeout: as shipped, stock builds nothing
    on this machine). The fix of ../shared/TVM-NOTES.md; runs in the builder's workers."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def stock_child(workload: str, trials: int, work: str, out: str, seed: int,
                as_shipped: bool = False) -> None:
    """Runs in its own process: stock tune_relax with its default runner and search, and
    its LocalBuilder with the build-import fix (or `as_shipped`, without)."""
    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.devices.local import local_cpu_target
    from tvmtui.graph.lowering import fuse_passes
    from tvmtui.graph.relax_import import onnx_to_relax
    from tvmtui.workloads import load_workload

    wl = load_workload(workload)
    target = tvm.target.Target(local_cpu_target())
    mod = onnx_to_relax(wl.model_bytes, wl.input_shapes)
    with target:  # stock extract_tasks finds nothing in an unfused module
        mod = tvm.transform.Sequential(fuse_passes(target))(mod)
    log: list[dict] = []

    @derived_object
    class Clock(ms.measure_callback.PyMeasureCallback):
        def apply(self, scheduler, task_id, candidates, builder_results, runner_results):
            for b, r in zip(builder_results, runner_results):
                log.append({
                    "t": time.time(),
                    "build_error": b.error_msg,
                    "run_s": [float(x) for x in r.run_secs] if r.run_secs else None,
                })

    builder = (ms.builder.LocalBuilder() if as_shipped
               else ms.builder.LocalBuilder(f_build=_build_without_intrinsics))
    ms.relax_integration.tune_relax(
        mod, params={}, target=target, work_dir=work, max_trials_global=trials, seed=seed,
        builder=builder, measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), Clock()],
    )
    Path(out).write_text(json.dumps({"log": log, "end": time.time()}))


def run_stock(workload: str, trials: int, work: Path, seed: int, as_shipped: bool) -> dict:
    out = work / f"stock{seed}.json"
    start = time.time()
    env = dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--stock-child", "--workload", workload, "--trials", str(trials),
         "--work", str(work / f"stock{seed}"), "--out", str(out), "--seed", str(seed),
         *(["--stock-as-shipped"] if as_shipped else [])],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    sampler = PeakRSS(proc.pid)
    sampler.start()
    proc.wait()
    sampler.done.set()
    data = json.loads(out.read_text())
    log, end = data["log"], data["end"]
    ok = [sum(e["run_s"]) / len(e["run_s"]) for e in log if e["run_s"]]
    timeouts = sum(1 for e in log if e["build_error"] and "Timeout" in e["build_error"])
    return {
        "tool": "stock tune_relax" + (" (as shipped)" if as_shipped else " (builder fix)"),
        "first_trial_s": log[0]["t"] - start if log else None,
        "trials": len(log),
        "total_s": end - start,
        "trials_per_min": 60 * len(log) / (end - start),
        "timeout_share": timeouts * 30.0 / (end - start),
        "build_errors": sum(1 for e in log if e["build_error"]),
        "peak_rss_mb": sampler.peak / 2**20,
        "best_ms": 1000 * min(ok) if ok else None,
        "latencies": [(e["t"] - start, 1000 * sum(e["run_s"]) / len(e["run_s"]))
                      for e in log if e["run_s"]],
    }


def _reached(latencies: list, ms: float | None) -> float | None:
    """Seconds from start to the first trial measured at or under `ms`."""
    if ms is None:
        return None
    return next((t for t, latency in latencies if latency <= ms * (1 + 1e-9)), None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="conv:C12")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-stock", action="store_true")
    ap.add_argument("--stock-child", action="store_true")
    ap.add_argument("--stock-as-shipped", action="store_true",
                    help="stock LocalBuilder without the build-import fix (times out here)")
    ap.add_argument("--work")
    ap.add_argument("--out")
    ap.add_argument("--first-trial", help="comma list of workloads: time to the first trial")
    ap.add_argument("--beside", help="with --first-trial: start each in a copy of this "
                                     "sessions folder (its sessions are reuse candidates)")
    args = ap.parse_args()
    if args.first_trial:
        with tempfile.TemporaryDirectory(prefix="tvmtui-first-") as tmp:
            rows = []
            for i, w in enumerate(args.first_trial.split(",")):
                # A folder each: no session warm-starts from another's records, except
                # those of the copied folder.
                folder = Path(tmp) / str(i)
                if args.beside:
                    shutil.copytree(args.beside, folder)
                rows.append(first_trial(w.strip(), folder))
        beside = (sum(1 for p in Path(args.beside).iterdir() if p.is_dir())
                  if args.beside else 0)
        print(f"{'workload':<12} {'tasks':>5} {'tasks at s':>10} {'first trial s':>13}  "
              f"{'first task':<24} variants" + (f"  (beside {beside} sessions)" if beside else ""))
        for r in rows:
            print(f"{r['workload']:<12} {r['tasks']:>5} {r['tasks_s']:>10.1f} "
                  f"{r['first_trial_s']:>13.1f}  {r.get('first_task', '-'):<24} "
                  f"{','.join(r.get('variants', []))}")
        dest = HERE / "results" / ("first_trial_beside.json" if beside else "first_trial.json")
        dest.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "rows": rows,
            "beside_sessions": beside,
            "command": " ".join(["python", "benchmarks/tuning_speed.py", *sys.argv[1:]])},
            indent=2) + "\n")
        print(f"wrote {dest}")
        return
    if args.stock_child:
        stock_child(args.workload, args.trials, args.work, args.out, args.seed,
                    args.stock_as_shipped)
        return
    runs = []
    with tempfile.TemporaryDirectory(prefix="tvmtui-bench-") as tmp:
        for seed in range(1, args.repeats + 1):
            ours = dict(run_tvmtui(args.workload, args.trials, Path(tmp), seed), seed=seed)
            runs.append(ours)
            if not args.skip_stock:
                stock = dict(run_stock(args.workload, args.trials, Path(tmp), seed,
                                       args.stock_as_shipped), seed=seed)
                runs.append(stock)
                # Time to quality: seconds until each tool first measured a trial as fast
                # as the best stock reached with this seed and budget (for stock, when it
                # measured that best).
                for run in (ours, stock):
                    run["to_stock_best_s"] = _reached(run["latencies"], stock["best_ms"])
            for run in runs:
                run.pop("latencies", None)
    rows = [*runs, *(_median_row(runs, tool) for tool in dict.fromkeys(r["tool"] for r in runs))]
    cols = ["tool", "seed", "first_trial_s", "trials", "total_s", "trials_per_min", "timeout_share",
            "build_errors", "peak_rss_mb", "best_ms", "to_stock_best_s"]
    print(f"workload {args.workload}, {args.trials} trials, {os.cpu_count()} cores")
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "-"))
                         for c in cols))
    result = {"workload": args.workload, "trials": args.trials, "date": time.strftime("%Y-%m-%d"),
              "machine": {"cores": os.cpu_count(), "cpu": _cpu_name()},
              "command": " ".join(["python", "benchmarks/tuning_speed.py", *sys.argv[1:]]),
              "rows": rows}
    dest = HERE / "results" / "tuning_speed.json"
    dest.parent.mkdir(exist_ok=True)
    dest.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {dest}")


def _median_row(runs: list[dict], tool: str) -> dict:
    mine = [r for r in runs if r["tool"] == tool]
    row = {"tool": tool, "seed": "median"}
    for key, value in mine[0].items():
        if key not in row and isinstance(value, (int, float)):
            vals = sorted(r[key] for r in mine if r[key] is not None)
            row[key] = float(vals[len(vals) // 2]) if vals else None
    return row


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
