"""Two tuned libraries of one workload, A against B, in one process and interleaved rounds.

On a shared VM a runtime's median moves 10-30% from one minute to the next, so two
sessions benched one after the other (`tvmtui bench`) cannot tell a 5-10% change from the
host. This exports each session's library (`tvmtui export`), loads both into one process,
checks they agree, and times them in alternating rounds of back-to-back calls; a slow
spell hits both alike. It prints each library's median and B's speedup over A, and
records the comparison in benchmarks/results/ab.json (one entry per workload, A and B).

    python benchmarks/ab.py SESSION_A SESSION_B [--sessions-dir DIR] [--rounds 25]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "ab.json"


def parse_library_args(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """`ap`'s arguments plus where the sessions are and how many threads TVM runs, set in
    the environment before TVM starts its thread pool (shared with in_context.py)."""
    ap.add_argument("--sessions-dir", default=None)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    return args


def export(session: str, out: Path, sessions_dir: str | None) -> dict:
    """`tvmtui export` of a session's library into `out`; its metadata."""
    where = ["--sessions-dir", sessions_dir] if sessions_dir else []
    done = subprocess.run([sys.executable, "-m", "tvmtui", "export", session, str(out), "--json",
                           *where], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"exporting {session} failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--seconds", type=float, default=0.05, help="per library per round")
    args = parse_library_args(ap)
    import numpy as np
    import tvm
    from tvm import relax

    with tempfile.TemporaryDirectory(prefix="tvmtui-ab-") as tmp:
        infos = [export(s, Path(tmp) / s, args.sessions_dir) for s in (args.a, args.b)]
        if infos[0]["input_shapes"] != infos[1]["input_shapes"]:
            raise SystemExit("the two sessions tuned different inputs: "
                             f"{infos[0]['input_shapes']} and {infos[1]['input_shapes']}")
        rng = np.random.default_rng(0)
        inputs = [tvm.runtime.tensor(rng.standard_normal(s).astype(np.float32))
                  for s in infos[0]["input_shapes"].values()]
        mains = []
        for info in infos:
            vm = relax.VirtualMachine(tvm.runtime.load_module(info["library"]), tvm.cpu())
            mains.append(vm["main"])
        outs = [np.asarray(m(*inputs).numpy()) for m in mains]
        scale = max(1.0, float(np.max(np.abs(outs[0]))))
        disagreement = float(np.max(np.abs(outs[0] - outs[1]))) / scale
        calls = []
        for main in mains:  # calls per round: about `seconds` each
            start = time.perf_counter()
            for _ in range(5):
                main(*inputs)
            calls.append(max(5, int(args.seconds / ((time.perf_counter() - start) / 5))))
        samples: list[list[float]] = [[], []]
        for rnd in range(args.rounds):
            for i in (0, 1) if rnd % 2 == 0 else (1, 0):
                for _ in range(3):
                    mains[i](*inputs)
                start = time.perf_counter()
                for _ in range(calls[i]):
                    mains[i](*inputs)
                samples[i].append(1000.0 * (time.perf_counter() - start) / calls[i])
    medians = [statistics.median(s) for s in samples]
    result = {
        "workload": infos[0]["workload"], "a": args.a, "b": args.b, "threads": args.threads,
        "a_ms": medians[0], "b_ms": medians[1], "speedup_b_over_a": medians[0] / medians[1],
        "a_rounds_ms": samples[0], "b_rounds_ms": samples[1],
        "relative_disagreement": disagreement, "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/ab.py " + " ".join(sys.argv[1:]),
    }
    print(f"{infos[0]['workload']}: A {args.a} {medians[0]:.4f} ms, B {args.b} "
          f"{medians[1]:.4f} ms (medians of {args.rounds} interleaved rounds): B is "
          f"{medians[0] / medians[1]:.3f}x A; outputs agree to {disagreement:.1e}")
    kept = json.loads(RESULT.read_text()) if RESULT.exists() else []
    kept = [r for r in kept if (r["workload"], r["a"], r["b"]) !=
            (result["workload"], result["a"], result["b"])]
    RESULT.write_text(json.dumps(kept + [result], indent=1) + "\n")


if __name__ == "__main__":
    main()
