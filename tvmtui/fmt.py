"""Formatting shared by the headless views and the app."""

from __future__ import annotations

import time


def ms(value: float | None) -> str:
    """Milliseconds: three decimals, or three significant digits below 0.1; `-` if unknown."""
    if value is None:
        return "-"
    return f"{value:.3f}" if value >= 0.1 else f"{value:.3g}"


def mflop(flops: float) -> str:
    value = flops / 1e6
    return f"{value:.1f}" if value >= 1 else f"{value:.3g}"


def hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


SESSION_COLUMNS = ("name", "workload", "device", "trials", "best ms", "speedup", "state", "updated")


def session_cells(summary) -> tuple[str, ...]:
    """One `SessionSummary` as the cells of SESSION_COLUMNS (CLI table and Sessions screen)."""
    from tvmtui.devices.local import describe_target

    pinned = summary.pinned
    workload = summary.workload + (
        " (" + ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in pinned.items()) + ")"
        if pinned else "")
    return (
        summary.name,
        workload,
        describe_target(summary.target),
        f"{summary.trials}/{summary.budget}",
        ms(summary.best_ms),
        session_speedup(summary.speedup),
        summary.status,
        time.strftime("%m-%d %H:%M", time.localtime(summary.updated)),
    )


def speedup_cell(row: dict) -> str:
    """A bench row (JSON) as its speedup: `2.31x`, `FAILED parity` (never a number), or `-`."""
    parity = row.get("parity")
    if parity and not parity["passed"]:
        return "FAILED parity"
    if row.get("speedup") is None:
        return "-"
    return f"{row['speedup']:.2f}x"


def parity_outputs(outputs: list[dict]) -> str:
    """A parity check's per-output figures: `output 0 (1x2016x18) 2.8e-04 FAIL; ...`."""
    cells = []
    for row in outputs:
        shape = "x".join(str(d) for d in row["shape"])
        figure = (f"{row['max_steps']:.0f} q-step(s)" if "max_steps" in row
                  else f"{row['max_rel_err']:.1e}")
        cells.append(f"output {row['index']} ({shape}) {figure} {'ok' if row['passed'] else 'FAIL'}")
    return "; ".join(cells) or "-"


def parity_cell(parity: dict | None) -> str:
    """A bench row's parity (JSON): `ok 6.4e-06`, `FAIL 3.1e-02` or `FAIL: <why>`."""
    if not parity:
        return "-"
    if parity.get("error"):
        return f"FAIL: {parity['error']}"
    mark = "ok" if parity["passed"] else "FAIL"
    if parity.get("max_steps") is not None:  # a quantized output: its error in steps
        return f"{mark} {parity['max_steps']:.0f} q-step(s)"
    return f"{mark} {parity['max_rel_err']:.1e}"


def session_speedup(bench: dict | None) -> str:
    """Sessions list: tuned TVM against the fastest baseline that passed parity."""
    if not bench or bench.get("speedup") is None:
        return "-"
    return f"{bench['speedup']:.2f}x {bench['vs']}"
