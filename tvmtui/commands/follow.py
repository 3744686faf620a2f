"""Following a session's event stream headless: JSON lines or a live rich table."""

from __future__ import annotations

import sys
import time

from tvmtui import fmt
from tvmtui.commands.common import print_json
from tvmtui.core import events as ev
from tvmtui.sessions import store as st

TERMINAL = ("finished", "stopped", "failed", "crashed")
LOW_DISK_BYTES = 16 << 20  # a worker that died with less free than this ran out of disk


def follow(session: st.Session, as_json: bool, after: int = 0) -> int:
    """Stream a session's events until its worker ends; Ctrl-C detaches."""
    from tvmtui.sessions.view import SessionView

    view = SessionView()
    seq = after
    if not as_json:  # the table needs the whole history; JSON streams only what is new
        for e in session.events(0):
            if e["seq"] <= after:
                view.apply(e)
    try:
        if as_json:
            status = _follow_json(session, seq)
        else:
            status = _follow_rich(session, view, seq)
    except KeyboardInterrupt:
        print(
            f"\ndetached; the worker keeps tuning. Follow it with `tvmtui attach {session.name}`, "
            f"stop it with `tvmtui stop {session.name}`.",
            file=sys.stderr,
        )
        return 0
    if status == "crashed":
        import shutil

        free = shutil.disk_usage(session.path).free
        if free < LOW_DISK_BYTES:
            print(f"tvmtui: the disk under {session.path} is full ({free // 1024} KiB free): the "
                  f"worker of {session.name!r} stopped; free some space, then `tvmtui resume "
                  f"{session.name}` (what was saved is kept)", file=sys.stderr)
            return 1
        print(
            f"tvmtui: the worker of {session.name!r} died; see {session.file(st.WORKER_LOG)}, "
            f"then `tvmtui resume {session.name}`",
            file=sys.stderr,
        )
        return 1
    if status == "failed":
        reason = session.meta().get("error") or "see worker.log"
        print(f"tvmtui: tuning {session.name!r} failed: {reason}", file=sys.stderr)
        return 1
    last = None
    for last in session.iter_events(ev.STATE):  # noqa: B007 - the last one is wanted
        pass
    if status == "stopped" and last and last.get("device_lost"):
        # Not the user's stop: scripts must see that the budget was not spent.
        print(f"tvmtui: tuning {session.name!r} stopped: {last.get('reason')}", file=sys.stderr)
        return 1
    return 0


def _poll(session: st.Session, seq: int):
    """Yield (new events, status) pairs until the session is no longer live."""
    while True:
        new = session.events(seq)
        if new:
            seq = new[-1]["seq"]
        status = session.status()
        yield new, status
        if status in TERMINAL or status == "created" and not session.worker_alive():
            # Drain anything written between the last read and the status check.
            tail = session.events(seq)
            if tail:
                yield tail, status
            return
        if not new:
            time.sleep(0.2)


def _follow_json(session: st.Session, seq: int) -> str:
    status = "unknown"
    for new, status in _poll(session, seq):  # noqa: B007 - the last status is returned
        for e in new:
            print_json(e)
    return status


def _follow_rich(session: st.Session, view, seq: int) -> str:
    from rich.console import Console
    from rich.live import Live

    console = Console(stderr=False)
    status = "unknown"
    with Live(_render(view, session.name), console=console, refresh_per_second=4) as live:
        for new, status in _poll(session, seq):
            for e in new:
                view.apply(e)
            if status == "crashed":
                view.state = "crashed"
            live.update(_render(view, session.name))
    if not console.is_terminal:
        console.line()  # off a terminal, Live leaves its last line unterminated
    return status


def _render(view, name: str):
    from rich.console import Group, RenderableType
    from rich.table import Table
    from rich.text import Text

    from tvmtui.devices.local import describe_target

    head = Text.assemble(
        (f"{view.workload or '?'}", "bold"),
        " @ ",
        describe_target(view.target) if view.target else "?",
        f"   session {name}   ",
        (view.state, "bold green" if view.state == "running" else "bold yellow"),
    )
    stats = Text(
        f"{view.trials_text()}   end-to-end estimate {fmt.ms(view.best_ms)} ms   "
        + (f"confirmed {fmt.ms(view.confirmed_ms)} ms   " if view.confirmed_ms else "") +
        f"elapsed {fmt.hms(view.elapsed_s())}   ETA {fmt.hms(view.eta_s())}"
    )
    table = Table(expand=False, pad_edge=False)
    for col in ("#", "task", "variant", "MFLOP", "weight", "trials", "best ms", "confirmed",
                "GFLOPS", "errors b/r"):
        table.add_column(col, justify="left" if col in ("task", "variant") else "right")
    for row in view.tasks:
        table.add_row(
            str(row.index),
            row.shown_name,
            view.label(row.variant),
            fmt.mflop(row.flops),
            str(row.weight),
            str(row.trials),
            fmt.ms(row.best_s * 1000 if row.best_s else None),
            fmt.ms(row.confirmed_ms),
            f"{row.gflops:.1f}" if row.gflops else "-",
            f"{row.build_errors}/{row.run_errors}",
        )
    from tvmtui.sessions.view import variants_line

    parts: list[RenderableType] = [head, stats, *([Text(line)] if (line := variants_line(view)) else []),
                                   table]
    if view.reason and view.state not in ("running",):
        parts.append(Text(view.reason, style="dim"))
    parts.extend(Text(f"! {n}", style="yellow") for n in view.notices[-3:])
    return Group(*parts)
