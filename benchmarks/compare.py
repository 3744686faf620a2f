"""The paper's comparison for this machine: tuned TVM against every baseline, per workload.

For each workload it tunes a session (or reuses `cmp-<workload>-<trials>` when that
session already reached its budget), runs `tvmtui bench` on it, and writes
benchmarks/results/compare.json (one row per workload and baseline) and compare.md (the
table, the variant (layout/algorithm) tuned TVM runs, and per layer: its variant, share of
the tuned time, GFLOPS and % of the CPU's *measured* FMA peak, from benchmarks/peak.py).

With `--bench-runs N` each session is benched N times in a row (the later runs without
the slow untuned TVM): a row's latencies are the median of the runs' medians and its
speedup the median of the runs' own ratios, each taken within one bench (on this shared
VM a runtime's median moves 10-30% from one minute to the next, and so does the baselines').

    python benchmarks/compare.py --trials 256 --net-trials-per-task 48
    python benchmarks/compare.py --workloads conv:C12 --trials 64 --frames 10   # quick
    python benchmarks/compare.py --render   # compare.md again from compare.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = ("conv:C2,conv:C6,conv:C9,conv:C12,dwconv:D1,dwconv:D9,dqn,dcgan,mobilenet,"
           "resnet18,lstm")
NETWORKS = {"resnet18", "mobilenet", "lstm", "dqn", "dcgan"}
INT8 = {"mobilenet-int8": "mobilenet", "resnet18-int8": "resnet18", "dqn-int8": "dqn"}


def tvmtui(*args: str, sessions: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tvmtui", *args, "--sessions-dir", str(sessions)],
        capture_output=True, text=True,
    )


def machine_label() -> str:
    """What the rows were measured on: the TVM target's CPU and the widest FMA vectors
    (a table grows by parts, and the machine under it can change between parts)."""
    shown = subprocess.run([sys.executable, "-m", "tvmtui", "devices", "--json"],
                           capture_output=True, text=True, check=True)
    mcpu = json.loads(shown.stdout)["local"]["target"].get("mcpu", "?")
    isa = json.loads((HERE / "results" / "peak.json").read_text())["isa"]
    return f"{mcpu} ({isa})"


def measured_peak_gflops() -> tuple[float, str]:
    """The all-cores FMA peak benchmarks/peak.py measured (run now if it has not been)."""
    peak = _peak_json()
    return peak["gflops_all_cores"], (f"measured by benchmarks/peak.py: {peak['isa']} FMA "
                                      f"chains on {peak['cores']} cores")


def measured_int8_peak() -> tuple[float | None, str]:
    """The all-cores int8 dot-product peak benchmarks/peak.py measured (None: no such
    instruction, or a peak.json from before it measured one)."""
    peak = _peak_json()
    gops = peak.get("int8_gops_all_cores")
    return gops, (f"int8 peak {gops:.0f} GOPS ({peak.get('int8_isa')} chains)" if gops else "")


def _peak_json() -> dict:
    path = HERE / "results" / "peak.json"
    if not path.exists() or "int8_isa" not in path.read_text():
        subprocess.run([sys.executable, str(HERE / "peak.py")], check=True)
    return json.loads(path.read_text())


def ensure_session(workload: str, trials: int, sessions: Path) -> tuple[str, float]:
    name = "cmp-" + re.sub(r"[^A-Za-z0-9]+", "-", workload) + f"-{trials}"
    shown = tvmtui("sessions", "show", name, "--json", sessions=sessions)
    if shown.returncode == 0:
        info = json.loads(shown.stdout)
        # finished: its budget spent, or its search space used up with trials to spare
        if info["status"] == "finished" or (info["trials"] >= trials
                                            and info["status"] == "stopped"):
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
    ap.add_argument("--bench-runs", type=int, default=1,
                    help="bench each session this many times; medians across the runs")
    ap.add_argument("--saved-bench", action="store_true",
                    help="use each session's last saved bench report instead of benching again")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite compare.md from compare.json (nothing tuned or benched)")
    args = ap.parse_args()
    if args.render:
        saved = json.loads((Path(args.out) / "compare.json").read_text())
        (Path(args.out) / "compare.md").write_text(markdown(
            saved["rows"], saved["workloads"], saved["peak_gflops"], saved["peak"],
            saved["commands"]))
        return
    sessions = Path(args.sessions_dir)
    sessions.mkdir(parents=True, exist_ok=True)
    peak, peak_text = measured_peak_gflops()
    int8_peak, int8_text = measured_int8_peak()
    if int8_peak:
        peak_text += f"; {int8_text}, for the int8 rows"
    machine = machine_label()
    rows, workloads = [], []
    for workload in [w.strip() for w in args.workloads.split(",") if w.strip()]:
        trials = args.trials
        if workload in NETWORKS or workload in INT8:
            card = json.loads(subprocess.run(
                [sys.executable, "-m", "tvmtui", "zoo", "show", workload, "--json"],
                capture_output=True, text=True, check=True).stdout)
            trials = args.net_trials_per_task * max(1, int(card.get("tasks") or 1))
        print(f"== {workload}: tuning {trials} trials", flush=True)
        name, tune_s = ensure_session(workload, trials, sessions)
        report = saved_bench(sessions / name) if args.saved_bench else None
        if report is None:
            reports = [bench(name, workload, args, sessions)]
            # Later runs: the same baselines but the slow untuned TVM, and nothing saved.
            again = ",".join(b["name"] for b in reports[0]["baselines"]
                             if b["name"] not in ("tvm-untuned", "tvm-tuned"))
            reports += [bench(name, workload, args, sessions, "--baselines", again, "--no-save")
                        for _ in range(args.bench_runs - 1)]
            report = combine(reports)
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
                "runs": b.get("runs", [b["median_ms"]]),
                "run_speedups": b.get("run_speedups"),
            })
        competitors = [r for r in rows if r["workload"] == workload and r["baseline"] != "tvm-untuned"]
        best = min(competitors, key=lambda r: r["median_ms"]) if competitors else None
        summary = {
            "workload": workload, "session": name, "trials": report["tuned_trials"],
            "machine": machine,
            # an int8 row's % of peak: of the dot-product instruction's, where measured
            "peak_gflops": int8_peak if workload in INT8 and int8_peak else peak,
            "peak_kind": "int8" if workload in INT8 and int8_peak else "FP32",
            "tune_s": round(tune_s, 1), "bench_s": report["seconds"], "flops": flops,
            "tvm_ms": tuned["median_ms"],
            "bench_runs": report.get("bench_runs", 1),
            "tvm_gflops": flops / tuned["median_ms"] / 1e6 if flops else None,
            "best_baseline": best["baseline"] if best else None,
            "best_ms": best["median_ms"] if best else None,
            "best_gflops": flops / best["median_ms"] / 1e6 if flops and best else None,
            "speedup_vs_best": best["speedup"] if best else None,
            "run_speedups_vs_best": best.get("run_speedups") if best else None,
            "unavailable": {b["name"]: b["reason"] for b in report["baselines"] if not b["available"]},
            "variant": report.get("variant"),
            "tasks": report.get("layers", []),
            # a quantized model: each row against LiteRT's reference kernels, in steps
            "reference_steps": (report.get("reference_kernels") or {}).get("steps"),
        }
        workloads.append(summary)
        print(f"   tvm {tuned['median_ms']:.3f} ms; best {summary['best_baseline']} "
              f"{summary['best_ms']:.3f} ms; speedup {summary['speedup_vs_best']:.2f}x", flush=True)
        write(Path(args.out), rows, workloads, peak, peak_text)  # after each: a cut run counts


def bench(name: str, workload: str, args, sessions: Path, *extra: str) -> dict:
    """One `tvmtui bench` of the session, its report."""
    proc = tvmtui("bench", name, "--json", "--frames", str(args.frames), "--repeats",
                  str(args.repeats), *extra, sessions=sessions)
    if proc.returncode != 0:
        raise SystemExit(f"bench {workload} failed: {proc.stderr.strip()[-400:]}")
    return json.loads(proc.stdout)


def combine(reports: list[dict]) -> dict:
    """The first report, with each runtime's median the median over the runs that have it,
    its speedup the median of each run's own ratio, and parity passed only if every run's
    did."""
    from statistics import median

    if len(reports) == 1:
        return reports[0]
    out = json.loads(json.dumps(reports[0]))
    rows = [{b["name"]: b for b in r["baselines"]} for r in reports]
    for b in out["baselines"]:
        runs = [r[b["name"]] for r in rows if b["name"] in r and r[b["name"]]["median_ms"]]
        if not runs:
            continue
        b["runs"] = [r["median_ms"] for r in runs]
        b["median_ms"] = median(b["runs"])
        if b["name"] == "tvm-tuned":
            continue
        ratios = [r[b["name"]]["median_ms"] / r["tvm-tuned"]["median_ms"] for r in rows
                  if b["name"] in r and r[b["name"]]["median_ms"] and r["tvm-tuned"]["median_ms"]]
        b["run_speedups"] = ratios
        passed = all(r["parity"]["passed"] for r in runs if r.get("parity"))
        if b.get("parity"):
            b["parity"]["passed"] = passed
        value = median(ratios)
        b["speedup"], b["speedup_unchecked"] = (value if passed else None), value
    out["bench_runs"] = len(reports)
    return out


def write(out: Path, rows: list[dict], workloads: list[dict], peak: float, peak_text: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    command = ("python benchmarks/compare.py " + " ".join(sys.argv[1:])).strip()
    for w in workloads:
        w.setdefault("command", command)
    rows, merged = merge_earlier(out / "compare.json", rows, workloads)
    commands = sorted({w.get("command", "?") for w in merged})
    (out / "compare.json").write_text(json.dumps(
        {"commands": commands, "created": time.time(), "peak_gflops": peak,
         "peak": peak_text, "rows": rows, "workloads": merged}, indent=2) + "\n")
    (out / "compare.md").write_text(markdown(rows, merged, peak, peak_text, commands))
    print(f"wrote {out / 'compare.json'} and {out / 'compare.md'}", flush=True)


def saved_bench(session_dir: Path) -> dict | None:
    """The last `tvmtui bench` report saved in the session (bench keeps each one)."""
    import sqlite3

    with sqlite3.connect(f"file:{session_dir / 'session.sqlite'}?mode=ro", uri=True) as db:
        row = db.execute("SELECT data FROM events WHERE event = 'bench' ORDER BY seq DESC "
                         "LIMIT 1").fetchone()
    return json.loads(row[0]) if row else None


def merge_earlier(path: Path, rows: list[dict], workloads: list[dict]) -> tuple[list, list]:
    """Keep an earlier run's workloads that this run did not redo (the table grows by parts)."""
    if not path.exists():
        return rows, workloads
    earlier = json.loads(path.read_text())
    redone = {w["workload"] for w in workloads}
    kept = [w for w in earlier.get("workloads", []) if w["workload"] not in redone]
    if not all("command" in w for w in kept):
        return rows, workloads  # a table from before the merge: start again
    order = DEFAULT.split(",")
    merged = sorted(kept + workloads, key=lambda w: order.index(w["workload"])
                    if w["workload"] in order else len(order))
    rows = [r for r in earlier.get("rows", []) if r["workload"] not in redone] + rows
    return rows, merged


def int8_section(workloads: list[dict]) -> list[str]:
    """The int8 twins: tuned TVM int8 against the best int8 baseline and against tvmtui's
    own tuned float twin (its row in this table), and each side's distance, in output
    quantization steps, from LiteRT's reference kernels."""
    by_name = {w["workload"]: w for w in workloads}
    rows = [w for w in workloads if w["workload"] in INT8]
    if not rows:
        return []
    lines = ["", "## Int8: against the int8 baselines and tvmtui's own float twin", "",
             "Steps: the largest output difference, in quantization steps, from LiteRT's "
             "reference kernels (the definition of the int8 arithmetic) on the bench's frames.",
             "", "| workload | variant | tuned TVM int8 ms | best int8 baseline | its ms | speedup "
             "| tuned TVM float ms | int8 vs float | steps: TVM / LiteRT (XNNPACK) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for w in rows:
        twin = by_name.get(INT8[w["workload"]])
        if twin and twin.get("machine") != w.get("machine"):
            twin = None  # measured on another machine: no ratio
        steps = w.get("reference_steps") or {}
        tvm_steps = steps.get("tvm-tuned")
        lite_steps = steps.get("tflite")
        sp = f"{w['speedup_vs_best']:.2f}x" if w["speedup_vs_best"] is not None else "-"
        float_ms = twin["tvm_ms"] if twin else None
        ratio = f"{float_ms / w['tvm_ms']:.2f}x" if float_ms and w["tvm_ms"] else "-"
        lines.append(
            f"| {w['workload']} | {w.get('variant') or '-'} | {w['tvm_ms']:.3f} | "
            f"{w['best_baseline']} | {w['best_ms']:.3f} | {sp} | "
            f"{f'{float_ms:.3f}' if float_ms else '-'} | {ratio} | "
            f"{'-' if tvm_steps is None else f'{tvm_steps:g}'} / "
            f"{'-' if lite_steps is None else f'{lite_steps:g}'} |")
    return lines


def markdown(rows: list[dict], workloads: list[dict], peak: float, peak_text: str,
             commands: list[str]) -> str:
    machines: dict[tuple[str, str, float], list[str]] = {}
    for w in workloads:
        key = (w.get("machine", "?"), w.get("peak_kind", "FP32"), _peak(w, peak))
        machines.setdefault(key, []).append(w["workload"])
    lines = [
        "# Tuned TVM against the baselines on this machine", "",
        "Made by " + "; ".join(f"`{c}`" for c in commands) + ".",
        "Measured on " + "; ".join(
            f"`{m}` ({kind} peak {p:.0f} G{'FL' if kind == 'FP32' else ''}OPS): "
            f"{', '.join(names)}"
            for (m, kind, p), names in machines.items()) +
        f". This run's peak was {peak_text}; a row's % of peak is against the peak of "
        "the machine it ran on.",
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
              "| workload | machine | variant | best baseline | its GFLOPS (% of peak) | tuned TVM "
              "GFLOPS (% of peak) | speedup | each bench run |",
              "|---|---|---|---|---|---|---|---|"]

    def gf(value, w):
        return f"{value:.0f} ({100 * value / _peak(w, peak):.0f}%)" if value else "-"

    def ms(value):
        return f"{value:.3f}" if value else "-"

    for w in workloads:
        sp = f"{w['speedup_vs_best']:.2f}x" if w["speedup_vs_best"] is not None else "-"
        each = " / ".join(f"{x:.2f}x" for x in w.get("run_speedups_vs_best") or []) or "-"
        lines.append(f"| {w['workload']} | {w.get('machine', '?')} | {w.get('variant') or '-'} | "
                     f"{w['best_baseline']} | {gf(w['best_gflops'], w)} | {gf(w['tvm_gflops'], w)} "
                     f"| {sp} | {each} |")
    lines += int8_section(workloads)
    lines += ["", "## Per layer: the variant that won, and where the time goes", "",
              "GFLOPS of a Winograd or sub-pixel layer count the work that algorithm does, "
              "not the direct convolution's. `best ms` is the layer's fastest trial, "
              "`confirmed ms` the lowest median of its best 4 records measured 9 more times "
              "after tuning (the record export builds; `-`: a session from before that step, "
              "or a layer under 2% of the time). Shown: the 8 layers taking the most time, "
              f"and any other taking 1% or more at under {LOW_PEAK:.0%} of the peak.", ""]
    for w in workloads:
        lines.append(f"**{w['workload']}** ({w['trials']} trials, variant {w.get('variant')}):")
        lines.append("")
        lines.append("| task | variant | weight | best ms | confirmed ms | share | GFLOPS "
                     "| % of peak |")
        lines.append("|---|---|---|---|---|---|---|---|")
        rows_ = sorted((t for t in w["tasks"] if t.get("best_ms")), key=lambda t: -(t["share"] or 0))
        for t in rows_[:8] + [t for t in rows_[8:] if _low(t, _peak(w, peak))]:
            g = t.get("gflops")
            speed = f"{g:.0f} | {100 * g / _peak(w, peak):.0f}%" if g else "- | -"
            lines.append(f"| {t['name']} | {t.get('variant_label', t['variant'])} | {t['weight']} | "
                         f"{t['best_ms']:.3f} | {ms(t.get('confirmed_ms'))} | "
                         f"{100 * (t['share'] or 0):.0f}% | {speed} |")
        lines.append("")
        if w["speedup_vs_best"] is not None and w["speedup_vs_best"] < 1.0:
            lines += [below_par(w, rows_, _peak(w, peak)), ""]
    unavailable = {k: v for w in workloads for k, v in w["unavailable"].items() if k != "tvm-tuned"}
    if unavailable:
        lines += ["", "Not available on this machine:", ""]
        lines += [f"- `{k}`: {v}" for k, v in unavailable.items()]
    return "\n".join(lines) + "\n"


# Why a row was below 1.0x when it was measured, and what would close it: the analysis
# behind the closing notes of issue 10 (per-kernel timings, bandwidth), shown under the
# row only while it stays below par and only under a row from the CPU it was made on.
# (The znver3 analyses of DQN, MobileNet and D9, and the znver4 one of D9 that the
# small-map depthwise seeds closed, are in git history.)
BELOW_PAR_WHY: dict[str, tuple[str, str]] = {}


LOW_PEAK = 0.85  # issue 10's bar for a direct convolution


def _low(task: dict, peak: float) -> bool:
    """A layer worth showing beyond the largest: 1% of the time or more, under LOW_PEAK."""
    g = task.get("gflops")
    return bool(g) and (task["share"] or 0) >= 0.01 and g / peak < LOW_PEAK


def _peak(w: dict, peak: float) -> float:
    """The FMA peak of the machine a workload's row ran on (the table's for older rows)."""
    return w.get("peak_gflops") or peak


def below_par(w: dict, tasks: list[dict], peak: float) -> str:
    """Which layer holds a below-par row back: the layers' sum against the deployed time,
    the largest layer's share and % of peak, and the recorded analysis if any."""
    total = sum(t["weight"] * (t.get("confirmed_ms") or t["best_ms"]) for t in tasks)
    top = tasks[0] if tasks else None
    text = (f"Below the best baseline ({w['speedup_vs_best']:.2f}x): the layers sum to "
            f"{total:.3f} ms (weight x confirmed, else best), {w['tvm_ms']:.3f} ms deployed")
    if top:
        g = top.get("gflops")
        text += (f"; the largest, `{top['name']}`, takes {100 * (top['share'] or 0):.0f}% of "
                 f"the time" + (f" at {100 * g / peak:.0f}% of peak" if g else ""))
    machine, why = BELOW_PAR_WHY.get(w["workload"], (None, None))
    why = why if machine == w.get("machine") else None  # analysis of a run on another CPU
    return text + (f". Why, and what would close it: {why}." if why else ".")


if __name__ == "__main__":
    main()
