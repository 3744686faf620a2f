"""Widgets of the live screen. Each renders from a `SessionView`; none touches TVM."""

from __future__ import annotations

import time

from rich.text import Text
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.markup import escape
from textual.widgets import DataTable, Static
from textual_plotext import PlotextPlot

from tvmtui.core.stats import spearman
from tvmtui.devices.local import describe_target
from tvmtui.fmt import hms as fmt_hms
from tvmtui.fmt import mflop as fmt_mflop
from tvmtui.fmt import ms as fmt_ms
from tvmtui.fmt import parity_cell, parity_outputs, speedup_cell
from tvmtui.sessions.view import SessionView

STREAM_ROWS = 200  # the trial stream keeps this many rows; older trials stay in the store

STATE_STYLE = {
    "running": "bold cyan",
    "paused": "bold yellow",
    "starting": "bold",
    "finished": "bold green",
    "stopped": "bold magenta",
    "failed": "bold red",
    "crashed": "bold red",
    "disconnected": "bold red",
    "replay": "bold cyan",
}


class SummaryBar(Static):
    """Workload @ device, session, state, trials/budget, estimate, elapsed, ETA."""

    def show(
        self, view: SessionView, name: str, state: str, extra: str = "", now: float | None = None
    ) -> None:
        target = describe_target(view.target) if view.target else "?"
        style = STATE_STYLE.get(state, "bold") + " reverse"
        if len(view.variant_labels) > 1 and view.best_ms is not None:
            extra = f"  as {escape(view.label(view.variant))}{extra}"
        if view.confirmed_ms is not None:
            extra = f"  confirmed {fmt_ms(view.confirmed_ms)} ms{extra}"
        self.update(
            f"[b]{escape(view.workload or '?')}[/b] @ {escape(target)}  "
            f"[{style}] {state} [/]  {escape(name)}\n"
            f"{view.trials_text()}  best {fmt_ms(view.best_ms)} ms  "
            f"elapsed {fmt_hms(view.elapsed_s(now))}  ETA {fmt_hms(view.eta_s(now))}{extra}"
        )


def _bound_render_caches(table: DataTable) -> None:
    """Size a streaming table's render caches to what fits on a screen.

    DataTable keys its caches by update count, so a table refreshed 4 times a second fills
    its 10,000-cell cache with stale entries (tens of MB) before the LRU bound holds.
    """
    table._cell_render_cache = LRUCache(1000)
    table._row_render_cache = LRUCache(200)
    table._line_cache = LRUCache(200)


class TaskTable(DataTable):
    """One row per tuning task."""

    # "confirmed": the lowest median of the task's best records, measured again after tuning.
    COLUMNS = ("#", "task", "variant", "MFLOP", "wt", "trials", "best ms", "confirmed", "GFLOPS",
               "share", "err b/r")

    def on_mount(self) -> None:
        _bound_render_caches(self)
        self.cursor_type = "row"
        self.zebra_stripes = True
        for col in self.COLUMNS:
            self.add_column(col, key=col)

    def show(self, view: SessionView) -> None:
        """Weights and shares are those of the chosen variant; its tasks are marked."""
        chosen = view.variant

        def weight(row) -> int:
            return row.weights.get(chosen, 0) if row.weights else row.weight

        total = sum(weight(r) * r.best_s for r in view.tasks if r.best_s) or None
        if self.row_count != len(view.tasks):
            self.clear()
            for row in view.tasks:
                self.add_row(*([""] * len(self.COLUMNS)), key=str(row.index))
        for row in view.tasks:
            share = (weight(row) * row.best_s / total) if (total and row.best_s) else None
            mark = "*" if weight(row) and len(view.variant_labels) > 1 else " "
            values = (
                str(row.index),
                row.shown_name,
                mark + view.label(row.variant) + (f" {row.instruction}" if row.instruction else ""),
                fmt_mflop(row.flops),
                str(weight(row)),
                str(row.trials),
                fmt_ms(row.best_s * 1000 if row.best_s else None),
                fmt_ms(row.confirmed_ms),
                f"{row.gflops:.1f}" if row.gflops else "-",
                f"{share:.0%}" if share is not None else "-",
                f"{row.build_errors}/{row.run_errors}",
            )
            key = str(row.index)
            for col, value in zip(self.COLUMNS, values):
                if self.get_cell(key, col) != value:  # unchanged cells keep their cache
                    self.update_cell(key, col, value)


class TrialStream(DataTable):
    """The latest trials, newest at the bottom; Enter drills into one."""

    COLUMNS = ("trial", "task", "latency ms", "GFLOPS", "predicted", "status")

    def on_mount(self) -> None:
        _bound_render_caches(self)
        self.cursor_type = "row"
        for col in self.COLUMNS:
            self.add_column(col, key=col)

    def add_trials(self, trials: list[dict], flops: dict[int, float]) -> None:
        if not trials:
            return
        follow = self.row_count == 0 or self.cursor_row >= self.row_count - 1
        for e in trials[-STREAM_ROWS:]:
            lat = sum(e["run_s"]) / len(e["run_s"]) if e.get("run_s") else None
            gflops = flops.get(e["task"], 0) / lat / 1e9 if lat else None
            if e.get("error_kind"):
                status = Text(e["error_kind"], style="red")
            elif e.get("reused_from"):
                status = Text(f"ok, reused from {e['reused_from']}", style="cyan")
            elif e.get("remeasured"):
                status = Text("ok, re-measured", style="cyan")
            elif e.get("seed"):
                status = Text("ok, seed", style="cyan")
            else:
                status = Text("ok")
            self.add_row(
                str(e["trial"]),
                e.get("task_name", str(e["task"])),
                fmt_ms(lat * 1000 if lat else None),
                f"{gflops:.1f}" if gflops else "-",
                "-" if e.get("predicted") is None else f"{e['predicted']:.3f}",
                status,
                key=str(e["trial"]),
            )
        while self.row_count > STREAM_ROWS:
            self.remove_row(self.coordinate_to_cell_key(Coordinate(0, 0)).row_key)
        if follow:
            self.move_cursor(row=self.row_count - 1, animate=False)


class EstimateChart(PlotextPlot):
    """End-to-end estimate (ms) against trials."""

    def show(self, points: list[tuple[int, float]]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("end-to-end estimate (ms) vs trials")
        if points:
            xs, ys = zip(*points)
            plt.plot(list(xs), list(ys), marker="braille")
        self.refresh()


class TaskBestChart(PlotextPlot):
    """Each task's best latency (ms) against the trial that reached it."""

    MAX_TASKS = 8  # the slowest tasks; more lines would be unreadable in a terminal

    def show(self, view: SessionView) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("per-task best (ms) vs trials")
        ranked = sorted(
            (row for row in view.tasks if row.index in view.task_history),
            key=lambda row: -(row.weight * (row.best_s or 0)),
        )[: self.MAX_TASKS]
        for row in ranked:
            points = list(view.task_history[row.index])
            points.append((view.trials, points[-1][1]))  # flat until the next improvement
            xs, ys = zip(*points)
            plt.plot(list(xs), list(ys), marker="braille", label=f"#{row.index} {row.name}"[:24])
        self.refresh()


class PredictionChart(PlotextPlot):
    """Cost-model score against measured GFLOPS, with their rank correlation."""

    def show(self, pairs: list[tuple[float, float]]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        rho = spearman([p for p, _ in pairs], [g for _, g in pairs])
        label = "n/a" if rho is None else f"{rho:+.2f}"
        plt.title(f"predicted score vs GFLOPS  (rank corr {label}, n={len(pairs)})")
        if pairs:
            plt.scatter([p for p, _ in pairs], [g for _, g in pairs], marker="dot")
        self.refresh()


class BaselinePanel(Static):
    """Baselines beside tuned TVM: latency, speedup and parity, from the session's latest
    `tvmtui bench` report; a failed parity check shows as FAILED, never as a speedup."""

    COLUMNS = "{:<12} {:>10} {:>9} {:>14}  {}"

    def show(self, view: SessionView, running_since: float | None = None) -> None:
        lines = [Text.assemble(("tuned TVM", "bold"),
                               f"  {fmt_ms(view.best_ms)} ms (tuning estimate)")]
        if running_since is not None:
            since = time.strftime("%H:%M:%S", time.localtime(running_since))
            lines.append(Text(f"benchmarking since {since} (in a subprocess; results appear "
                              "here)", style="yellow"))
        report = view.bench
        if not report:
            lines.append(Text("No baseline results yet. Press b to run them (tvmtui bench).",
                              style="dim"))
            self.update(Text("\n").join(lines))
            return
        when = time.strftime("%m-%d %H:%M", time.localtime(report["created"]))
        variant = f", variant {report['variant']}" if report.get("variant") else ""
        lines.append(Text(
            f"bench {when} on {report.get('device') or 'local CPU'}: "
            f"{report['tuned_trials']} trials{variant}, {report['threads']} "
            f"thread(s), parity vs {report['reference'] or '-'} on {report['frames']} frames, "
            f"tol {report['tolerance']:g}", style="dim"))
        lines.append(Text(self.COLUMNS.format("baseline", "ms", "IQR", "speedup", "parity"),
                          style="bold"))
        missing = []
        for row in report["baselines"]:
            if not row["available"]:
                lines.append(Text(self.COLUMNS.format(row["name"], "-", "-", "-", "not available"),
                                  style="dim"))
                missing.append(Text(f"{row['name']}: {row['reason']}", style="dim"))
                continue
            speed = speedup_cell(row)
            style = ("bold red" if speed.startswith("FAILED")
                     else "green" if (row.get("speedup") or 0) >= 1 else "")
            lines.append(Text(self.COLUMNS.format(
                row["name"], fmt_ms(row["median_ms"]), fmt_ms(row["iqr_ms"]), speed,
                parity_cell(row.get("parity"))), style=style))
        notes = [Text(f"note: {n}", style="yellow") for n in report.get("notes") or []]
        if report.get("inputs"):
            notes.insert(0, Text(f"inputs: {report['inputs']}", style="dim"))
        for row in report["baselines"]:
            parity = row.get("parity") or {}
            if parity and not parity["passed"] and parity.get("outputs"):
                notes.append(Text(f"{row['name']} parity: {parity_outputs(parity['outputs'])}",
                                  style="red"))
            if parity.get("verdict"):
                notes.append(Text(f"{row['name']} verdict: {parity['verdict']}", style="red"))
        self.update(Text("\n").join(lines + missing + notes))


class BoardTable(DataTable):
    """Per-board health on an RPC device: measured, lost, queue timeouts, waits, last seen."""

    COLUMNS = ("server", "ok", "lost", "queue t/o", "run err", "avg queue s", "last seen")

    def on_mount(self) -> None:
        _bound_render_caches(self)
        self.cursor_type = "row"
        for col in self.COLUMNS:
            self.add_column(col, key=col)

    def show(self, view: SessionView, now: float | None = None) -> None:
        now = now or time.time()
        self.clear()
        for server, board in sorted(view.boards.items()):
            seen = "-" if board.last_t is None else f"{max(0.0, now - board.last_t):.0f} s ago"
            lost = Text(str(board.lost), style="bold red" if board.lost else "")
            waits = Text(str(board.queue_timeouts), style="yellow" if board.queue_timeouts else "")
            self.add_row(server, str(board.ok), lost, waits, str(board.run_errors),
                         f"{board.mean_queue_s:.2f}", seen, key=server)
