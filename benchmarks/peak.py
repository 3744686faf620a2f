"""The CPU's measured float32 FMA peak, per core and on all cores.

/proc/cpuinfo gives the base (TSC) clock, not the clock the cores run at, so a peak
computed from it is wrong. This compiles a small C loop of independent fused
multiply-add chains on the widest vectors the CPU has (GCC vector extensions: 64 bytes on
AVX-512, 32 on AVX2, 16 on NEON), runs it on one thread and on every core, and prints and
writes the GFLOPS (benchmarks/results/peak.json; `compare.py` reads it).

    python benchmarks/peak.py
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "peak.json"
CHAINS = 12  # independent accumulators: enough to cover FMA latency x pipes

SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
typedef float vec __attribute__((vector_size(VBYTES)));
#define LANES (VBYTES / 4)
int main(int argc, char **argv) {
    long iters = atol(argv[1]);
    int threads = atoi(argv[2]);
    double t0 = omp_get_wtime();
    float sink = 0;
    #pragma omp parallel num_threads(threads) reduction(+:sink)
    {
        vec acc[CHAINS], a, b;
        for (int l = 0; l < LANES; l++) { a[l] = 0.999f; b[l] = 1e-7f; }
        for (int c = 0; c < CHAINS; c++) acc[c] = a * (float)(c + 1);
        for (long i = 0; i < iters; i++) {
            #pragma GCC unroll 12
            for (int c = 0; c < CHAINS; c++) acc[c] = acc[c] * a + b;
        }
        for (int c = 0; c < CHAINS; c++) for (int l = 0; l < LANES; l++) sink += acc[c][l];
    }
    double dt = omp_get_wtime() - t0;
    printf("%.6f %g\n", dt, (double)sink);
    return 0;
}
"""


def vector_bytes() -> tuple[int, str]:
    if platform.machine() in ("aarch64", "arm64"):
        return 16, "NEON"
    flags = Path("/proc/cpuinfo").read_text()
    if " avx512f" in flags:
        return 64, "AVX-512"
    if " avx2" in flags and " fma" in flags:
        return 32, "AVX2+FMA"
    return 16, "SSE"


def build(vbytes: int, workdir: Path) -> Path:
    src, exe = workdir / "fma.c", workdir / "fma"
    src.write_text(SOURCE)
    subprocess.run(["gcc", "-O3", "-march=native", "-ffp-contract=fast", "-fopenmp",
                    f"-DVBYTES={vbytes}", f"-DCHAINS={CHAINS}", str(src), "-o", str(exe)],
                   check=True)
    return exe


def gflops(exe: Path, vbytes: int, threads: int, seconds: float = 1.0) -> float:
    """Best of 5 runs, each sized to take about `seconds`."""
    iters = 1_000_000
    while True:
        dt = float(subprocess.run([str(exe), str(iters), str(threads)], capture_output=True,
                                  text=True, check=True).stdout.split()[0])
        if dt > seconds / 4:
            break
        iters *= 4
    iters = int(iters * seconds / dt)
    flop = 2 * (vbytes // 4) * CHAINS * iters * threads
    best = 0.0
    for _ in range(5):
        dt = float(subprocess.run([str(exe), str(iters), str(threads)], capture_output=True,
                                  text=True, check=True).stdout.split()[0])
        best = max(best, flop / dt / 1e9)
    return best


def main() -> None:
    vbytes, isa = vector_bytes()
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(vbytes, Path(tmp))
        one = gflops(exe, vbytes, 1)
        every = gflops(exe, vbytes, cores)
    result = {"isa": isa, "vector_bytes": vbytes, "chains": CHAINS, "cores": cores,
              "gflops_1_core": round(one, 1), "gflops_all_cores": round(every, 1),
              "machine": platform.machine(), "measured": time.time()}
    print(f"{'ISA':<10} {'cores':>5} {'1 core GFLOPS':>14} {'all cores GFLOPS':>17}")
    print(f"{isa:<10} {cores:>5} {one:>14.1f} {every:>17.1f}")
    RESULT.parent.mkdir(exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULT}")


if __name__ == "__main__":
    main()
