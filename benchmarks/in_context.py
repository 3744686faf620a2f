"""Each kernel of a tuned library: its time in the deployed run against its time alone.

A tuning trial times one kernel called back to back, its weights and inputs warm in the
caches; deployed, each kernel follows others that evicted them. This exports a session's
library (`tvmtui export`), records the kernels one inference calls with the VM's own
buffers, and times, in interleaved rounds: the whole inference; each kernel within the
sequence (every kernel called in order, each call timed); each kernel alone (called back
to back). It prints a table, worst first, and writes benchmarks/results/in_context.json.

    python benchmarks/in_context.py SESSION [--sessions-dir DIR] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ab import export, parse_library_args  # benchmarks/ is the script's own folder

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "in_context.json"


def _median_ms(samples: list[float]) -> float:
    return 1000.0 * statistics.median(samples)


def profile(library: Path, shapes: dict, rounds: int, calls: int) -> dict:
    import numpy as np
    import tvm
    from tvm import relax

    lib = tvm.runtime.load_module(str(library))
    vm = relax.VirtualMachine(lib, tvm.cpu())
    rng = np.random.default_rng(0)
    inputs = [tvm.runtime.tensor(rng.standard_normal(s).astype(np.float32))
              for s in shapes.values()]
    sequence = []

    def record(_func, name, before, _ret, *args):
        if before and not name.startswith(("vm.", "runtime.")):
            sequence.append((name, list(args)))
        return 0

    vm.set_instrument(record)
    vm["main"](*inputs)
    vm.set_instrument(None)
    kernels = [(name, lib.get_function(name, query_imports=True), args)
               for name, args in sequence]
    whole, within = [], [[] for _ in kernels]
    alone = [[] for _ in kernels]
    for _ in range(calls):  # warm up
        vm["main"](*inputs)
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            vm["main"](*inputs)
        whole.append((time.perf_counter() - start) / calls)
        for _ in range(calls):
            for i, (_, fn, args) in enumerate(kernels):
                start = time.perf_counter()
                fn(*args)
                within[i].append(time.perf_counter() - start)
        for i, (_, fn, args) in enumerate(kernels):
            fn(*args)
            start = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            alone[i].append((time.perf_counter() - start) / calls)
    rows: dict = {}
    for i, (name, _, _) in enumerate(kernels):
        row = rows.setdefault(name, {"kernel": name, "calls": 0, "in_run_ms": 0.0,
                                     "alone_ms": 0.0})
        row["calls"] += 1
        row["in_run_ms"] += _median_ms(within[i])
        row["alone_ms"] += _median_ms(alone[i])
    table = sorted(rows.values(), key=lambda r: r["alone_ms"] - r["in_run_ms"])
    return {
        "inference_ms": _median_ms(whole),
        "kernels_in_run_ms": sum(r["in_run_ms"] for r in table),
        "kernels_alone_ms": sum(r["alone_ms"] for r in table),
        "kernels": table,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("session")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20, help="calls per round")
    args = parse_library_args(ap)
    with tempfile.TemporaryDirectory(prefix="tvmtui-in-context-") as tmp:
        meta = export(args.session, Path(tmp), args.sessions_dir)
        result = profile(Path(meta["library"]), meta["input_shapes"], args.rounds, args.calls)
    result.update(session=args.session, workload=meta["workload"], threads=args.threads,
                  date=time.strftime("%Y-%m-%d"),
                  command="python benchmarks/in_context.py " + " ".join(sys.argv[1:]))
    print(f"{meta['workload']}: inference {result['inference_ms']:.3f} ms; its kernels "
          f"{result['kernels_in_run_ms']:.3f} ms in the run, {result['kernels_alone_ms']:.3f} "
          f"ms alone ({args.threads} threads)")
    print(f"{'kernel':64} {'calls':>5} {'in run':>8} {'alone':>8} {'ratio':>6}")
    for r in result["kernels"]:
        ratio = r["in_run_ms"] / r["alone_ms"] if r["alone_ms"] else float("nan")
        print(f"{r['kernel'][:64]:64} {r['calls']:5d} {r['in_run_ms']:8.3f} "
              f"{r['alone_ms']:8.3f} {ratio:6.2f}")
    RESULT.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
