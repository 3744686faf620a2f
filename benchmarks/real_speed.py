"""Speed mode for the real-model corpus: each tunable model tuned with a budget a user would
give (`tvmtui tune --trials N --minutes M`: the worker stops searching at whichever comes
first, then confirms its best), then benched against its own runtime,
ONNX Runtime, OpenVINO and LiteRT (where it has the file each reads); with the minutes until
tuned TVM first beat each. Writes results/real_speed.{json,md}.

    python benchmarks/real_speed.py --models ppocr_cls,silero_vad_openvino
    python benchmarks/real_speed.py --trials 800 --minutes 10 --frames 20
    python benchmarks/real_speed.py --rebench      # bench the tuned sessions again

Minutes to beat: the tuning curve (each round's end-to-end estimate, `round_done`
events) scaled by the measured tuned time over the final estimate, compared with each
baseline's measured median; `-` when the scaled curve never got below it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from real_models import _last_line, _run, run_corpus  # noqa: E402

BASELINES = ("tflite", "onnxruntime", "openvino")
GOAL = 1.2


def _curve(sessions: Path, name: str) -> list[tuple[float, float]]:
    """(seconds since tuning started, end-to-end estimate ms) after every round."""
    from tvmtui.core import events as ev
    from tvmtui.sessions.store import Session

    session = Session.open(sessions, name)
    try:
        start, points = None, []
        for e in session.iter_events(ev.SESSION_STARTED, ev.ROUND_DONE):
            if e["event"] == ev.SESSION_STARTED and start is None:
                start = e["t"]
            elif e.get("best_ms") is not None and start is not None:
                points.append((e["t"] - start, float(e["best_ms"])))
        return points
    finally:
        session.close()


def machine_label() -> str:
    """The CPU the rows are measured on (rows accumulate, the machine can change between runs)."""
    shown = subprocess.run([sys.executable, "-m", "tvmtui", "devices", "--json"],
                           capture_output=True, text=True, check=True)
    return f"{json.loads(shown.stdout)['local']['target'].get('mcpu', '?')}, {os.cpu_count()} cores"


def _tune(model, name: str, sessions: Path, trials: int, minutes: float) -> dict:
    """Tune detached under the time budget (stopped by hand only if its worker overran it
    by 5 minutes); how it went."""
    shapes = [a for s in model.shapes for a in ("--shape", s)]
    start = time.time()
    tune = _run(["tune", str(model.path), "--trials", str(trials), "--minutes", str(minutes),
                 "--session", name, "--detach", *shapes], sessions, 600)
    if tune.returncode != 0:
        return {"outcome": "refused" if tune.returncode == 2 else "tune failed",
                "message": _last_line(tune.stderr)}
    stopped = False
    while True:
        time.sleep(10)
        shown = json.loads(_run(["sessions", "show", name, "--json"], sessions, 60).stdout)
        if shown.get("status") in ("finished", "stopped", "failed", "crashed", "paused"):
            break
        if not stopped and time.time() - start > minutes * 60 + 300:
            _run(["stop", name], sessions, 60)
            stopped = True
        if time.time() - start > minutes * 60 + 900:
            break
    return {"outcome": "tuned", "tune_s": round(time.time() - start, 1),
            "trials": shown.get("trials"), "tasks": len(shown.get("tasks", [])),
            "stopped_at_cap": stopped, "status": shown.get("status")}


def _bench(name: str, sessions: Path, frames: int) -> dict:
    """One `tvmtui bench` of the session against BASELINES: its JSON report, or the failure."""
    bench = _run(["bench", name, "--json", "--frames", str(frames), "--repeats", "50",
                  "--baselines", ",".join(BASELINES)], sessions, 1800)
    if bench.returncode != 0:
        return {"failed": _last_line(bench.stderr)}
    return json.loads(bench.stdout)


def speed_row(model, sessions: Path, trials: int, minutes: float, frames: int,
              machine: str, benches: int, old: dict | None) -> dict:
    """Tune (or, with `old`, keep the session tuned before and its row's tuning figures),
    then bench `benches` times: each runtime's time is the median of the benches'
    medians, the speedup the median of the benches' own against the fastest baseline
    (this VM's speed drifts between minutes), parity from the first."""
    name = "speed-" + model.name.replace("_", "-")
    row = {"model": model.name, "format": model.path.suffix[1:], "budget_trials": trials,
           "budget_minutes": minutes, "machine": machine}
    if old is not None and old.get("outcome") == "tuned" and (sessions / name).exists():
        row.update({k: old[k] for k in ("outcome", "tune_s", "trials", "tasks",
                                        "stopped_at_cap", "status", "budget_trials",
                                        "budget_minutes")})
    else:
        shutil.rmtree(sessions / name, ignore_errors=True)
        row.update(_tune(model, name, sessions, trials, minutes))
    if row["outcome"] != "tuned":
        return row
    reports = [_bench(name, sessions, frames if i == 0 else 2) for i in range(benches)]
    if "failed" in reports[0]:
        row.update(outcome="bench failed", message=reports[0]["failed"])
        return row
    runs = [{b["name"]: b["median_ms"] for b in r["baselines"] if b["median_ms"] is not None}
            for r in reports if "failed" not in r]
    row["bench_runs"] = runs

    def median_ms(n: str) -> float | None:
        got = sorted(run[n] for run in runs if n in run)
        return got[len(got) // 2] if got else None

    report = reports[0]
    by = {b["name"]: b for b in report["baselines"]}
    tuned_ms = median_ms("tvm-tuned")
    row["tvm_ms"] = tuned_ms
    row["baselines"] = {
        n: {"ms": median_ms(n), "parity": (by[n].get("parity") or {}).get("passed"),
            "verdict": (by[n].get("parity") or {}).get("verdict"),
            "reason": by[n].get("reason")} for n in BASELINES if n in by}
    ran = {n: b["ms"] for n, b in row["baselines"].items() if b["ms"] is not None}
    if ran and tuned_ms:
        row["best"] = min(ran, key=lambda n: ran[n])
        each = ratios(row)
        row["speedup"] = each[len(each) // 2] if each else ran[row["best"]] / tuned_ms
    curve = _curve(sessions, name)
    scale = tuned_ms / curve[-1][1] if curve and tuned_ms else None
    row["minutes_to_beat"] = {
        n: next((round(t / 60, 1) for t, est in curve if scale and est * scale < ms), None)
        for n, ms in ran.items()}
    layers = sorted(report.get("layers") or [], key=lambda r: -(r.get("share") or 0))
    row["top_layers"] = [{"name": r["name"], "share": r.get("share"), "best_ms": r.get("best_ms"),
                          "variant": r.get("variant_label")} for r in layers[:3]]
    return row


def _cell(row: dict, name: str) -> str:
    b = row.get("baselines", {}).get(name) or {}
    if b.get("ms") is None:
        return "-"
    return f"{b['ms']:.3f}" + ("" if b.get("parity") else " (parity miss)")


def ratios(row: dict) -> list[float]:
    """The speedup against the row's best baseline in each of its benches, sorted."""
    return sorted(run[row["best"]] / run["tvm-tuned"] for run in row.get("bench_runs", [])
                  if "tvm-tuned" in run and row.get("best") in run)


def markdown(rows: list[dict], command: str) -> str:
    lines = ["# Real models: tuned speed against their runtimes", "",
             f"Latest: `{command}` (rows accumulate; each row's own command is in "
             "real_speed.json). Each tunable corpus model (benchmarks/corpus.py) tuned as a user "
             "would (`tvmtui tune --trials N --minutes M`: its search stops at whichever comes "
             "first; rows from before `--minutes` were stopped by hand at M) on this 2-core "
             "machine, then "
             "benched 3 times (50 timed runs each; the first checks parity on 20 frames): each "
             "runtime's time is the median of the benches' medians; the speedup is the median "
             "of the benches' own (against the fastest baseline), its range in brackets "
             "(this VM's speed drifts from minute to minute). Minutes to beat: the tuning "
             "curve scaled to the measured time, against each baseline's "
             "median.", "",
             "| model | tasks | budget | trials | tuned ms | LiteRT ms | ORT ms | OpenVINO ms | "
             "speedup vs best | minutes to beat (LiteRT / ORT / OV) | held back by | machine |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["outcome"] != "tuned":
            lines.append(f"| {r['model']} | - | - | - | {r['outcome']}: {r.get('message', '')} "
                         "| | | | | | | " + r.get("machine", "?") + " |")
            continue

        beat = " / ".join("-" if (m := r["minutes_to_beat"].get(n)) is None else f"{m:g}"
                          for n in BASELINES)
        held = "" if (r.get("speedup") or 0) >= GOAL else "; ".join(
            f"{x['name']} {100 * (x['share'] or 0):.0f}%" for x in r.get("top_layers", []))
        speedup = f"{r['speedup']:.2f}x vs {r['best']}" if r.get("speedup") else "-"
        spread = ratios(r)
        if len(spread) > 1:
            speedup += f" ({spread[0]:.2f}-{spread[-1]:.2f})"
        lines.append(f"| {r['model']} | {r['tasks']} | {r['budget_trials']} trials / "
                     f"{r['budget_minutes']:g} min | {r['trials']} | {r['tvm_ms']:.3f} | "
                     f"{_cell(r, 'tflite')} | {_cell(r, 'onnxruntime')} | {_cell(r, 'openvino')} | "
                     f"{speedup} | {beat} | {held} | {r.get('machine', '?')} |")
    tuned = [r for r in rows if r.get("speedup")]
    ahead = sum(r["speedup"] >= GOAL for r in tuned)
    lines += ["", f"{ahead} of {len(tuned)} tuned models at {GOAL}x or more of the fastest "
              "baseline; held back by: the three layers with the largest share of the tuned "
              "time, for each model below that."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--trials", type=int, default=800)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--benches", type=int, default=3,
                    help="benches per model; each runtime's time is their median")
    ap.add_argument("--rebench", action="store_true",
                    help="keep the sessions tuned before (and their rows' tuning figures)")
    ap.add_argument("--sessions-dir", default=str(HERE / "work" / "speed"))
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    machine = machine_label()
    path = Path(args.out) / "real_speed.json"
    old = {r["model"]: r for r in json.loads(path.read_text())["rows"]} \
        if args.rebench and path.exists() else {}
    run_corpus("real_speed", args,
               lambda model, sessions: speed_row(model, sessions, args.trials, args.minutes,
                                                 args.frames, machine, args.benches,
                                                 old.get(model.name)),
               markdown, "speedup")


if __name__ == "__main__":
    main()
