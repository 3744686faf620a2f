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

    return (
        summary.name,
        summary.workload,
        describe_target(summary.target),
        f"{summary.trials}/{summary.budget}",
        ms(summary.best_ms),
        "-",  # filled once baselines exist (`tvmtui bench`)
        summary.status,
        time.strftime("%m-%d %H:%M", time.localtime(summary.updated)),
    )
