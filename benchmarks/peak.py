"""The CPU's measured float32 FMA peak and int8 dot-product peak, per core and on all cores.

/proc/cpuinfo gives the base (TSC) clock, not the clock the cores run at, so a peak
computed from it is wrong. This compiles a small C loop of independent fused
multiply-add chains on the widest vectors the CPU has (GCC vector extensions: 64 bytes on
AVX-512, 32 on AVX2, 16 on NEON), runs it on one thread and on every core, and prints and
writes the GFLOPS (benchmarks/results/peak.json; `compare.py` reads it). A second loop
does the same with the int8 dot-product instruction where the CPU has one (AVX512-VNNI
`vpdpbusd`, 64 byte products a 64-byte vector; Arm `sdot`, 16 on NEON): its GOPS count a
multiply and an add per byte product, as the int8 rows of `compare.py` count.

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


DOT_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#if defined(__AVX512VNNI__)
#include <immintrin.h>
typedef __m512i acc_t;
#define BYTES 64
#define SPLAT(v) _mm512_set1_epi32(v)
#define DOT(c, a, b) _mm512_dpbusd_epi32(c, a, b)
#define SUM(c) _mm512_reduce_add_epi32(c)
#elif defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>
typedef int32x4_t acc_t;
#define BYTES 16
#define SPLAT(v) vdupq_n_s32(v)
#define DOT(c, a, b) vdotq_s32(c, vreinterpretq_s8_s32(a), vreinterpretq_s8_s32(b))
#define SUM(c) vaddvq_s32(c)
#else
#error "no int8 dot-product instruction"
#endif
int main(int argc, char **argv) {
    long iters = atol(argv[1]);
    int threads = atoi(argv[2]);
    double t0 = omp_get_wtime();
    long sink = 0;
    #pragma omp parallel num_threads(threads) reduction(+:sink)
    {
        acc_t acc[CHAINS], a = SPLAT(argc), b = SPLAT(argc + 1);
        for (int c = 0; c < CHAINS; c++) acc[c] = SPLAT(c);
        for (long i = 0; i < iters; i++) {
            #pragma GCC unroll 12
            for (int c = 0; c < CHAINS; c++) acc[c] = DOT(acc[c], a, b);
        }
        for (int c = 0; c < CHAINS; c++) sink += SUM(acc[c]);
    }
    double dt = omp_get_wtime() - t0;
    printf("%.6f %ld\n", dt, sink);
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


def build(vbytes: int, workdir: Path, source: str = SOURCE, name: str = "fma") -> Path:
    src, exe = workdir / f"{name}.c", workdir / name
    src.write_text(source)
    subprocess.run(["gcc", "-O3", "-march=native", "-ffp-contract=fast", "-fopenmp",
                    f"-DVBYTES={vbytes}", f"-DCHAINS={CHAINS}", str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    return exe


def dot_isa() -> tuple[int, str] | None:
    """(bytes an instruction multiplies, its name) of the CPU's int8 dot product, or None."""
    flags = Path("/proc/cpuinfo").read_text()
    if platform.machine() in ("aarch64", "arm64"):
        return (16, "sdot") if " asimddp" in flags else None
    return (64, "AVX512-VNNI") if " avx512_vnni" in flags else None


def gflops(exe: Path, vbytes: int, threads: int, seconds: float = 1.0, lanes: int = 0) -> float:
    """Best of 5 runs, each sized to take about `seconds`; `lanes`: operations per chain
    step over 2 (float32 lanes by default; byte products for the dot loop)."""
    iters = 1_000_000
    while True:
        dt = float(subprocess.run([str(exe), str(iters), str(threads)], capture_output=True,
                                  text=True, check=True).stdout.split()[0])
        if dt > seconds / 4:
            break
        iters *= 4
    iters = int(iters * seconds / dt)
    flop = 2 * (lanes or vbytes // 4) * CHAINS * iters * threads
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
        dot = dot_isa()
        if dot is not None:
            dot_exe = build(vbytes, Path(tmp), DOT_SOURCE, "dot")
            dot_one = gflops(dot_exe, vbytes, 1, lanes=dot[0])
            dot_every = gflops(dot_exe, vbytes, cores, lanes=dot[0])
    result = {"isa": isa, "vector_bytes": vbytes, "chains": CHAINS, "cores": cores,
              "gflops_1_core": round(one, 1), "gflops_all_cores": round(every, 1),
              "machine": platform.machine(), "measured": time.time()}
    print(f"{'ISA':<12} {'cores':>5} {'1 core G(FL)OPS':>16} {'all cores G(FL)OPS':>19}")
    print(f"{isa:<12} {cores:>5} {one:>16.1f} {every:>19.1f}")
    if dot is not None:
        result.update(int8_isa=dot[1], int8_gops_1_core=round(dot_one, 1),
                      int8_gops_all_cores=round(dot_every, 1))
        print(f"{dot[1]:<12} {cores:>5} {dot_one:>16.1f} {dot_every:>19.1f}")
    RESULT.parent.mkdir(exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULT}")


if __name__ == "__main__":
    main()
