"""What a session produces: export (the tuned library) and bench (baselines, parity)."""

from __future__ import annotations

import sys
from pathlib import Path

from tvmtui import fmt
from tvmtui.commands.common import check_writable, open_session, print_json, sessions_dir
from tvmtui.core.errors import UserError


def cmd_export(args) -> int:
    from tvmtui.sessions.export import export_session

    check_writable(args, args.name)
    session = open_session(args, args.name)
    info = export_session(session, Path(args.out))
    if args.json:
        print_json(info)
    else:
        for note in info["notes"]:
            print(f"note: {note}", file=sys.stderr)
        print(f"exported {info['library']} and {info['metadata']}")
    return 0


def cmd_bench(args) -> int:
    from tvmtui.devices.local import cpu_count

    if args.threads is not None and args.threads < 1 or args.frames < 1 or args.repeats < 1:
        raise UserError("--threads, --frames and --repeats must be at least 1")
    if not args.tolerance > 0:
        raise UserError(f"--tolerance must be positive (got {args.tolerance})")
    from tvmtui.baselines import frames as fr
    from tvmtui.baselines.bench import BenchRequest, BoardLost, parse_baselines, run_bench
    from tvmtui.baselines.resolve import resolve, save_report

    names = parse_baselines(args.baselines)
    from tvmtui.baselines.runners import cannot_run_here

    found = resolve(sessions_dir(args), args.target, args.shape)
    if found.device is None:  # on a board, the board says what it has
        blocked = {n: cannot_run_here(n, {"armnn_delegate": args.armnn_delegate}) for n in names}
        if all(blocked.values()):
            raise UserError("none of the baselines asked for can run here: " +
                            "; ".join(f"{n}: {why}" for n, why in blocked.items()))
    threads = args.threads or found.board_cores or cpu_count()
    model = found.model
    frames = (fr.folder_frames(model, Path(args.inputs), args.frames) if args.inputs
              else fr.seeded_frames(model, args.frames, args.seed))
    notes = list(found.notes)
    if found.session is not None and found.session.worker_alive():
        notes.append("the session is still tuning: timings share the CPU with its measurements")
    if not args.json:
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        where = "" if found.device is None else " on the board"
        print(f"benchmarking {model.name}{where}: {', '.join(names)} with {threads} thread(s), "
              f"parity on {len(frames)} frame(s) ...", file=sys.stderr)
    request = BenchRequest(
        model=model, target=found.target, baselines=names, frames=frames,
        tolerance=args.tolerance, threads=threads, warmup=args.warmup, repeats=args.repeats,
        max_seconds=args.max_seconds, session=found.session, tuned_reason=found.tuned_reason,
        options={"armnn_delegate": args.armnn_delegate}, graph_hash=found.graph_hash,
        device=found.device, float_twin=found.float_twin,
        inputs=(f"frames from {args.inputs}" if args.inputs else
                f"seeded frames (seed {args.seed}): {fr.describe(model)}"),
    )
    try:
        report = run_bench(request)
    except BoardLost as lost:  # show the failed rows; save nothing
        lost.report.notes = notes + lost.report.notes
        _show_bench(args, lost.report, shown=len(notes))
        raise
    report.notes = notes + report.notes
    if found.session is not None and found.writable and not args.no_save:
        save_report(found.session, report)
    _show_bench(args, report, shown=len(notes))
    return 0


def _show_bench(args, report, shown: int) -> None:
    """The report as JSON, or as a table followed by the notes not `shown` before it."""
    if args.json:
        print_json(report.to_json())
        return
    _print_bench(report)
    for note in report.notes[shown:]:
        print(f"note: {note}", file=sys.stderr)


def _print_bench(report) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report.workload} on {report.device} · {report.threads} thread(s) · "
                        f"parity vs {report.reference or '-'} on {report.frames} frame(s), "
                        f"tol {report.tolerance:g}")
    for col in ("baseline", "median ms", "IQR ms", "runs", "speedup", "parity", "runtime"):
        table.add_column(col, justify="right" if "ms" in col or col in ("runs", "speedup") else "left",
                         no_wrap=col != "runtime", overflow="fold" if col == "runtime" else "ellipsis")
    missing = []
    for row in report.to_json()["baselines"]:
        if not row["available"]:
            table.add_row(row["name"], "-", "-", "-", "-", "-", "[dim]not available (below)[/]")
            missing.append(f"{row['name']}: {row['reason']}")
            continue
        table.add_row(row["name"], fmt.ms(row["median_ms"]), fmt.ms(row["iqr_ms"]),
                      str(row["runs"]), fmt.speedup_cell(row), fmt.parity_cell(row["parity"]),
                      row["detail"] or "")
    console = Console()
    console.print(table)
    for line in missing:
        console.print(f"  {line}", style="dim", highlight=False)
    if report.inputs:
        console.print(f"inputs: {report.inputs}", style="dim", highlight=False)
    for row in report.baselines:
        if row.parity is not None and not row.parity.passed:
            console.print(f"  {row.name} parity: {fmt.parity_outputs(row.parity.outputs)}",
                          highlight=False)
            if row.parity.verdict:
                console.print(f"  {row.name} verdict: {row.parity.verdict}", highlight=False)
    if report.session:
        print(f"tuned build: session {report.session} ({report.tuned_trials} trials), "
              f"variant {report.variant}; bench took {report.seconds:.0f} s")
        for layer in report.layers:
            share = f"{layer['share'] * 100:.0f}%" if layer["share"] is not None else "-"
            print(f"  {layer['name']:<40} {layer['variant_label']:<10} x{layer['weight']} "
                  f"{fmt.ms(layer['best_ms'])} ms  {share}")
