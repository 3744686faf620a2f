"""The `tvmtui` command line: tune, follow, control and export sessions headless.

Exit codes: 0 ok, 2 bad input (one-line error), 1 internal failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from tvmtui import fmt
from tvmtui.errors import UserError
from tvmtui.sessions import store as st

TERMINAL = ("finished", "stopped", "failed", "crashed")


# ---- helpers ----------------------------------------------------------------------------
def _root(args) -> Path:
    return st.sessions_root(args.sessions_dir)


def _open(args, name: str) -> st.Session:
    root = _root(args)
    return st.Session.open(st.resolve_root(root, name), name)


def _writable(args, name: str) -> None:
    if st.resolve_root(_root(args), name) != _root(args):
        raise UserError(
            f"{name!r} is the bundled demo (read-only): replay it with `tvmtui replay {name}`"
        )


def _print_json(obj) -> None:
    print(json.dumps(obj), flush=True)


# ---- following a session ----------------------------------------------------------------
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
            _print_json(e)
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
    return status


def _render(view, name: str):
    from rich.console import Group
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
        f"trials {view.trials}/{view.budget}   end-to-end estimate {fmt.ms(view.best_ms)} ms   "
        f"elapsed {fmt.hms(view.elapsed_s())}   ETA {fmt.hms(view.eta_s())}"
    )
    table = Table(expand=False, pad_edge=False)
    for col in ("#", "task", "variant", "MFLOP", "weight", "trials", "best ms", "GFLOPS",
                "errors b/r"):
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
            f"{row.gflops:.1f}" if row.gflops else "-",
            f"{row.build_errors}/{row.run_errors}",
        )
    from tvmtui.sessions.view import variants_line

    parts = [head, stats, *([Text(line)] if (line := variants_line(view)) else []), table]
    if view.reason and view.state not in ("running",):
        parts.append(Text(view.reason, style="dim"))
    parts.extend(Text(f"! {n}", style="yellow") for n in view.notices[-3:])
    return Group(*parts)


# ---- commands ---------------------------------------------------------------------------
def cmd_tune(args) -> int:
    from tvmtui.devices.local import describe_target
    from tvmtui.sessions.launch import create_session, default_name, spawn_worker
    from tvmtui.workloads import load_workload

    if args.trials < 1:
        raise UserError(f"--trials must be at least 1 (got {args.trials})")
    for flag, value, least in (("--population", args.population, 2), ("--batch", args.batch, 1),
                               ("--genetic-iters", args.genetic_iters, 0),
                               ("--warmup-samples", args.warmup_samples, 0),
                               ("--cores", args.cores, 1)):
        if value is not None and value < least:
            raise UserError(f"{flag} must be at least {least} (got {value})")
    name = args.session
    if name is not None:
        st.check_name(name)
    workload = load_workload(args.workload, args.shape)
    name = name or default_name(workload)
    root = _root(args)
    if (root / name).exists():
        raise UserError(
            f"session {name!r} already exists in {root}; pick another --session name, "
            f"or `tvmtui resume {name}`"
        )
    from tvmtui.devices.resolve import parse_target, resolve_device
    from tvmtui.sessions.launch import same_chip_sessions

    resolved = resolve_device(args.device, args.cores,
                              parse_target(args.target) if args.target else None)
    target = resolved.target
    if not args.json:
        for prior in same_chip_sessions(root, workload.graph_hash, target,
                                        resolved.fingerprint["id"]):
            print(f"note: session {prior.name!r} already tuned {workload.name} on this chip "
                  f"({prior.trials} trials, best {fmt.ms(prior.best_ms)} ms): "
                  f"`tvmtui resume {prior.name} --trials N` continues it", file=sys.stderr)
    from tvmtui.graph.variants import parse_variants

    try:
        variants = parse_variants(args.variants)
    except ValueError as exc:
        raise UserError(f"--variants: {exc}") from None
    options = {
        "variants": variants,
        "reuse": not args.no_reuse,
        "batch": args.batch,
        "population": args.population,
        "genetic_iters": args.genetic_iters,
        "warmup_samples": args.warmup_samples,
        "seed": args.seed,
    }
    session = create_session(root, name, workload, target, args.trials, options,
                             device=resolved.device.to_json(), fingerprint=resolved.fingerprint)
    pid = spawn_worker(session)
    _started(session, pid)
    if not args.json:
        print(
            f"session {name}: tuning {workload.name} on {describe_target(target)} "
            f"via {resolved.device.url()} ({args.trials} trials), worker pid {pid}",
            file=sys.stderr,
        )
    if args.detach:
        if args.json:
            _print_json({"session": name, "pid": pid})
        return 0
    if _interactive(args):
        return run_app(args, start="live", session=name)
    return follow(session, args.json)


def _interactive(args) -> bool:
    """The app runs on a terminal unless --json or --headless asks for the plain stream."""
    return not (args.json or getattr(args, "headless", False)) and sys.stdout.isatty()


def run_app(args, start: str = "launch", session: str | None = None, speed: float = 10.0) -> int:
    from tvmtui.tui.app import TvmTuiApp

    TvmTuiApp(_root(args), start=start, session=session, speed=speed).run()
    return 0


def _started(session: st.Session, pid: int) -> None:
    """Wait for the new worker to take the session's lock; fail clearly if it died first."""
    from tvmtui.sessions.launch import wait_for_lock

    if not wait_for_lock(session, pid) and session.status() not in TERMINAL:
        raise RuntimeError(
            f"the worker for {session.name!r} exited before it started; "
            f"see {session.file(st.WORKER_LOG)}"
        )


def cmd_resume(args) -> int:
    from tvmtui.sessions.launch import spawn_worker

    if args.transfer_k < 1:
        raise UserError(f"--transfer-k must be at least 1 (got {args.transfer_k})")

    _writable(args, args.name)
    session = _open(args, args.name)
    meta = session.meta()
    done = int(meta.get("trials", 0))
    history = session.events(0)
    after = history[-1]["seq"] if history else 0
    if session.worker_alive():
        if args.trials:
            session.send("budget", done + args.trials)
        if meta.get("status") == "paused":
            session.send("resume")
            print(f"session {args.name}: resuming the paused worker", file=sys.stderr)
        else:
            print(f"session {args.name} is already running; following it", file=sys.stderr)
        return follow(session, args.json, after)
    budget = done + args.trials if args.trials else int(meta["budget"])
    _check_chip(session, meta, args)
    if budget <= done:
        raise UserError(
            f"session {args.name!r} already has {done} trials (budget {meta['budget']}); "
            f"give more with `tvmtui resume {args.name} --trials N`"
        )
    session.set_meta(budget=budget, status="created", error=None)
    pid = spawn_worker(session)
    _started(session, pid)
    if args.detach:
        return 0
    if not args.json:
        print(
            f"session {args.name}: resuming at trial {done + 1} of {budget}, worker pid {pid}",
            file=sys.stderr,
        )
    return follow(session, args.json, after)


def _check_chip(session: st.Session, meta: dict, args) -> None:
    """Resuming on another chip: refuse, or (with --transfer) plan the re-measurement."""
    from tvmtui.devices.fingerprint import Fingerprint, differences
    from tvmtui.devices.resolve import resolve_device

    device = meta.get("device") or {"kind": "local"}
    url = None if device.get("kind", "local") == "local" else _device_url(device)
    here = resolve_device(url, override=meta["target"]).fingerprint
    stored = meta.get("fingerprint")
    if not stored:
        session.set_meta(fingerprint=here)
        return
    if stored.get("id") == here["id"]:
        return
    old_label = Fingerprint.from_json(stored).label()
    new_label = Fingerprint.from_json(here).label()
    diff = "; ".join(differences(stored, here))
    if not args.transfer:
        raise UserError(
            f"session {session.name!r} was tuned on another chip ({old_label}, id {stored['id']};"
            f" here {new_label}, id {here['id']}: {diff}); its timings do not hold here: "
            f"`tvmtui resume {session.name} --transfer` re-measures its best records first"
        )
    # Latencies measured before this trial number were taken on the other chip.
    session.set_meta(transfer={"from": dict(stored, label=old_label), "to": here,
                               "k": args.transfer_k, "pending": True, "asked": time.time()},
                     trusted_from=int(meta.get("trials", 0)) + 1)
    print(f"transfer: re-measuring the best {args.transfer_k} records per task of "
          f"{old_label} on {new_label} before tuning on", file=sys.stderr)


def _device_url(device: dict) -> str:
    from tvmtui.devices.rpc import Device

    return Device(**device).url()


def cmd_attach(args) -> int:
    session = _open(args, args.name)
    if _interactive(args):
        session.close()
        return run_app(args, start="live", session=args.name)
    return follow(session, args.json)


def cmd_replay(args) -> int:
    if not args.speed > 0 or args.speed == float("inf"):  # also nan
        raise UserError(f"--speed must be a positive number (got {args.speed})")
    _open(args, args.name).close()  # a clear error now, not inside the app
    if not sys.stdout.isatty():
        raise UserError("replay needs a terminal (it plays through the live screen)")
    return run_app(args, start="replay", session=args.name, speed=args.speed)


def serve_web(host: str, port: int) -> int:
    """The same app in a browser (textual-serve runs `tvmtui` per visitor)."""
    try:
        from textual_serve.server import Server
    except ImportError:
        raise UserError(
            "--web needs textual-serve: pip install -e '.[web]' (or pip install textual-serve)"
        ) from None
    print(f"serving tvmtui on http://{host}:{port} (Ctrl-C stops)", file=sys.stderr)
    Server(f"{sys.executable} -m tvmtui", host=host, port=port, title="tvmtui").serve()
    return 0


def cmd_app(args) -> int:
    if getattr(args, "web", False):
        return serve_web(args.host, args.port)
    # textual-serve (`--web`) runs the app through pipes with its web driver named in
    # TEXTUAL_DRIVER: no terminal, and none needed.
    if not sys.stdout.isatty() and not os.environ.get("TEXTUAL_DRIVER"):
        raise UserError("the app needs a terminal; see `tvmtui --help` for headless commands")
    return run_app(args, start="launch")


def _require_live(session: st.Session) -> None:
    if not session.worker_alive():
        raise UserError(
            f"session {session.name!r} has no running worker (status {session.status()}); "
            f"`tvmtui resume {session.name}` starts one"
        )


def _await_state(session: st.Session, wanted: tuple[str, ...], after: int, timeout: float) -> str | None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for e in session.events(after):
            after = e["seq"]
            if e["event"] == "state" and e["state"] in wanted:
                return e["state"]
        if not session.worker_alive():
            return None
        time.sleep(0.2)
    return None


def cmd_pause(args) -> int:
    session = _open(args, args.name)
    _require_live(session)
    if session.meta().get("status") == "paused":
        print(f"session {args.name}: already paused (`tvmtui resume {args.name}` continues)")
        return 0
    last = session.events(0)[-1]["seq"]
    session.send("pause")
    got = _await_state(session, ("paused", "finished", "stopped"), last, args.wait)
    if got == "paused":
        print(f"session {args.name}: paused (`tvmtui resume {args.name}` continues)")
    else:
        print(f"session {args.name}: pause requested; it takes effect after the current batch")
    return 0


def cmd_stop(args) -> int:
    session = _open(args, args.name)
    _require_live(session)
    last = session.events(0)[-1]["seq"]
    session.send("stop", "stopped by user")
    got = _await_state(session, ("stopped", "finished", "failed"), last, args.wait)
    if got:
        print(f"session {args.name}: {got}; `tvmtui resume {args.name}` continues it later")
    else:
        print(f"session {args.name}: stop requested; the worker stops after the current batch")
    return 0


def cmd_budget(args) -> int:
    _writable(args, args.name)
    session = _open(args, args.name)
    if args.trials < 1:
        raise UserError(f"budget must be at least 1 trial (got {args.trials})")
    if session.worker_alive():
        session.send("budget", args.trials)
        print(f"session {args.name}: budget set to {args.trials} trials")
    else:
        session.set_meta(budget=args.trials)
        print(
            f"session {args.name}: budget set to {args.trials} trials "
            f"(not running; `tvmtui resume {args.name}` continues)"
        )
    return 0


def cmd_export(args) -> int:
    from tvmtui.sessions.export import export_session

    _writable(args, args.name)
    session = _open(args, args.name)
    info = export_session(session, Path(args.out))
    if args.json:
        _print_json(info)
    else:
        for note in info["notes"]:
            print(f"note: {note}", file=sys.stderr)
        print(f"exported {info['library']} and {info['metadata']}")
    return 0


def cmd_bench(args) -> int:
    from tvmtui.devices.local import cpu_count

    threads = cpu_count() if args.threads is None else args.threads
    if threads < 1 or args.frames < 1 or args.repeats < 1:
        raise UserError("--threads, --frames and --repeats must be at least 1")
    if not args.tolerance > 0:
        raise UserError(f"--tolerance must be positive (got {args.tolerance})")
    from tvmtui.baselines import frames as fr
    from tvmtui.baselines.bench import BenchRequest, parse_baselines, run_bench
    from tvmtui.baselines.resolve import resolve, save_report

    names = parse_baselines(args.baselines)
    from tvmtui.baselines.runners import cannot_run_here

    blocked = {n: cannot_run_here(n, {"armnn_delegate": args.armnn_delegate}) for n in names}
    if all(blocked.values()):
        raise UserError("none of the baselines asked for can run here: " +
                        "; ".join(f"{n}: {why}" for n, why in blocked.items()))
    found = resolve(_root(args), args.target, args.shape)
    model = found.model
    frames = (fr.folder_frames(model, Path(args.inputs), args.frames) if args.inputs
              else fr.seeded_frames(model, args.frames, args.seed))
    notes = [found.note] if found.note else []
    if found.session is not None and found.session.worker_alive():
        notes.append("the session is still tuning: timings share the CPU with its measurements")
    if not args.json:
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        print(f"benchmarking {model.name}: {', '.join(names)} with {threads} thread(s), "
              f"parity on {len(frames)} frame(s) ...", file=sys.stderr)
    report = run_bench(BenchRequest(
        model=model, target=found.target, baselines=names, frames=frames,
        tolerance=args.tolerance, threads=threads, warmup=args.warmup, repeats=args.repeats,
        max_seconds=args.max_seconds, session=found.session, tuned_reason=found.tuned_reason,
        options={"armnn_delegate": args.armnn_delegate}, graph_hash=found.graph_hash,
    ))
    report.notes = notes
    if found.session is not None and found.writable and not args.no_save:
        save_report(found.session, report)
    if args.json:
        _print_json(report.to_json())
    else:
        _print_bench(report)
    return 0


def _print_bench(report) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report.workload} · {report.threads} thread(s) · parity vs "
                        f"{report.reference or '-'} on {report.frames} frame(s), tol {report.tolerance:g}")
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
    if report.session:
        print(f"tuned build: session {report.session} ({report.tuned_trials} trials), "
              f"variant {report.variant}; bench took {report.seconds:.0f} s")
        for layer in report.layers:
            share = f"{layer['share'] * 100:.0f}%" if layer["share"] is not None else "-"
            print(f"  {layer['name']:<40} {layer['variant_label']:<10} x{layer['weight']} "
                  f"{fmt.ms(layer['best_ms'])} ms  {share}")


def cmd_devices(args) -> int:
    from tvmtui.devices.fingerprint import this_fingerprint
    from tvmtui.devices.local import local_cpu_target, local_gpus

    obj = {"local": {"target": local_cpu_target(), "fingerprint": this_fingerprint().to_json(),
                     "gpus": local_gpus()}}
    if args.tracker:
        from tvmtui.devices import rpc

        host, port = rpc.parse_hostport(args.tracker)
        obj["tracker"] = {"address": f"{host}:{port}", "keys": rpc.tracker_keys(host, port)}
        if args.key:
            device = rpc.Device("tracker", host, port, args.key)
            sess, addr, _ = rpc.connect_device(device, session_timeout=30, wait=30)
            obj["board"] = dict(rpc.board_info(sess), server=addr, key=args.key)
    if args.json:
        _print_json(obj)
        return 0
    _print_devices(obj)
    return 0


def _print_devices(obj: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from tvmtui.devices.local import describe_target

    console = Console()
    columns = [("local", obj["local"])]
    if "board" in obj:
        columns.append((f"board {obj['board']['key']} ({obj['board']['server']})", obj["board"]))
    table = Table(title="devices")
    table.add_column("")
    for title, _ in columns:
        table.add_column(title)
    rows = ["id", "arch", "vendor", "model_name", "family", "model", "stepping", "microcode",
            "implementer", "part", "variant", "revision", "cores", "caches", "isa", "kernel",
            "llvm", "tvm"]
    for row in rows:
        cells = []
        for _, col in columns:
            value = (col.get("fingerprint") or {}).get(row)
            if isinstance(value, dict):
                value = " ".join(f"{k} {v}" for k, v in value.items())
            elif isinstance(value, list):
                value = " ".join(value)
            cells.append("-" if value in (None, "") else str(value))
        if any(c != "-" for c in cells):
            table.add_row(row, *cells)
    table.add_row("target", *[json.dumps(col.get("target")) for _, col in columns])
    console.print(table)
    local = obj["local"]
    console.print(f"local CPU: {describe_target(local['target'])}; "
                  f"GPUs: {', '.join(g['name'] for g in local['gpus']) or 'none'}")
    if "tracker" in obj:
        keys = Table(title=f"tracker {obj['tracker']['address']}")
        for col in ("key", "total", "free", "pending", "servers"):
            keys.add_column(col)
        for key, entry in sorted(obj["tracker"]["keys"].items()):
            keys.add_row(key, str(entry["total"]), str(entry["free"]), str(entry["pending"]),
                         " ".join(entry["servers"]))
        console.print(keys)


def cmd_sessions(args) -> int:
    root = _root(args)
    if args.action == "list":
        found, broken = st.list_sessions(root)
        if args.json:
            _print_json([s.to_json() for s in found])
        else:
            _print_sessions(found, root)
        for _name, err in broken:
            print(f"warning: {err}", file=sys.stderr)
        return 0
    if not args.name:
        raise UserError(f"`tvmtui sessions {args.action}` needs a session name")
    if args.action == "show":
        from tvmtui.sessions.view import view_of

        session = _open(args, args.name)
        summary = session.summary()
        meta = session.meta()
        view = view_of(session)
        obj = summary.to_json()
        obj.update(
            {
                "workload_info": meta["workload"],
                "options": meta.get("options", {}),
                "versions": meta.get("versions", {}),
                "device": meta.get("device", {"kind": "local"}),
                "fingerprint": meta.get("fingerprint"),
                "transfer": meta.get("transfer"),
                "events": session.count_events(None),
                "path": str(session.path),
                "variant": view.variant,
                "variant_label": view.label(view.variant),
                "variants_ms": view.variants_ms,
                "tasks": [
                    {"index": r.index, "name": r.name, "variant": r.variant,
                     "variant_label": view.label(r.variant), "weights": r.weights,
                     "trials": r.trials, "best_ms": r.best_s * 1000 if r.best_s else None,
                     "gflops": r.gflops, "failed": r.failed, "without": r.without}
                    for r in view.tasks
                ],
            }
        )
        if args.json:
            _print_json(obj)
        else:
            for key, value in obj.items():
                print(f"{key:14} {value}")
        return 0
    if args.action == "rm":
        st.remove_session(root, args.name)
        print(f"removed session {args.name}")
        return 0
    raise UserError(f"unknown sessions action {args.action!r}")


def _print_sessions(found: list[st.SessionSummary], root: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    if not found:
        print(f"no sessions in {root}")
        return
    table = Table()
    for col in fmt.SESSION_COLUMNS:
        table.add_column(col)
    for s in found:
        table.add_row(*fmt.session_cells(s))
    Console().print(table)


def _zoo_rows() -> list[dict]:
    from tvmtui.workloads import builtin, nets

    rows = []
    for spec in nets.NETS.values():
        stats = nets.count(spec)
        rows.append({
            "name": spec.name,
            "kind": "network",
            "flops": 2 * stats.macs,
            "params": stats.params,
            "input_shape": spec.input_shape,
            "description": spec.description,
            "layers": stats.layers,
        })
    from tvmtui.workloads.int8 import INT8_TWINS, describe

    for name, float_name in INT8_TWINS.items():
        stats = nets.count(nets.NETS[float_name])
        rows.append({
            "name": name,
            "kind": "network",
            "flops": 2 * stats.macs,
            "params": stats.params,
            "input_shape": nets.NETS[float_name].input_shape,
            "description": describe(name),
            "layers": stats.layers,
        })
    for spec in builtin.OPS.values():
        rows.append({
            "name": spec.name,
            "kind": spec.kind,
            "flops": spec.flops,
            "params": spec.params,
            "input_shape": spec.input_shape,
            "description": spec.describe(),
            "layers": [spec.describe()],
        })
    return rows


def cmd_zoo(args) -> int:
    rows = _zoo_rows()
    if args.action == "list":
        if args.json:
            _print_json([{k: v for k, v in r.items() if k != "layers"} for r in rows])
        else:
            for row in rows:
                print(
                    f"{row['name']:14} {row['description'][:44]:44} "
                    f"{row['flops'] / 1e6:9.1f} MFLOP {row['params'] / 1e6:6.2f} M params"
                )
        return 0
    if not args.name:
        raise UserError(f"`tvmtui zoo {args.action}` needs a workload name")
    row = next((r for r in rows if r["name"].lower() == args.name.lower()), None)
    if row is None:
        raise UserError(f"unknown workload {args.name!r}; `tvmtui zoo list` shows them")
    if args.action == "show":
        return _zoo_show(row, args.json)
    return _zoo_export(row, Path(args.dir or "."), args.json)


def _zoo_show(row: dict, as_json: bool) -> int:
    """The workload card, with the number of MetaSchedule tasks for this CPU."""
    from tvmtui.devices.local import local_cpu_target
    from tvmtui.graph.relax_import import load_relax
    from tvmtui.graph.variants import extract_tasks, prepare
    from tvmtui.tuning.tvm_env import import_tvm
    from tvmtui.workloads import load_workload

    workload = load_workload(row["name"])
    target = local_cpu_target()
    tvm = import_tvm(target)
    target = tvm.target.Target(target)
    mod, _ = prepare(load_relax(workload.format, workload.model_bytes, workload.input_shapes),
                     target)
    tasks = extract_tasks(mod, target)
    card = dict(row, graph_hash=workload.graph_hash, tasks=len(tasks),
                task_names=[t.task_name for t in tasks])
    if as_json:
        _print_json(card)
        return 0
    print(f"{card['name']}: {card['description']}")
    print(f"  input {'x'.join(map(str, card['input_shape']))}, "
          f"{card['flops'] / 2e6:.1f} MMACs ({card['flops'] / 1e9:.3f} GFLOP), "
          f"{card['params']:,} parameters, {card['tasks']} tuning tasks, "
          f"graph hash {card['graph_hash']}")
    print(f"  {len(card['layers'])} weighted layers:")
    for layer in card["layers"]:
        print(f"    {layer}")
    return 0


def _zoo_export(row: dict, out: Path, as_json: bool) -> int:
    from tvmtui.workloads import load_workload, nets

    workload = load_workload(row["name"])
    out.mkdir(parents=True, exist_ok=True)
    stem = workload.name.replace(":", "_")
    path = out / f"{stem}.{workload.format}"
    path.write_bytes(workload.model_bytes)
    written = {"name": workload.name, workload.format: str(path),
               "graph_hash": workload.graph_hash}
    if workload.name in nets.NETS:
        tfl = out / f"{stem}.tflite"
        tfl.write_bytes(nets.network_files(nets.NETS[workload.name])[1].read_bytes())
        written["tflite"] = str(tfl)
    if as_json:
        _print_json(written)
    else:
        print("wrote " + " and ".join(str(v) for k, v in written.items() if k in ("onnx", "tflite")))
    return 0


# ---- parser -----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--sessions-dir", help="where sessions live (default $TVMTUI_SESSIONS or ./sessions)"
    )
    parser = argparse.ArgumentParser(
        prog="tvmtui",
        description="Tune TVM models with MetaSchedule; watch, control, export. "
        "Without a command: the interactive app.",
    )
    parser.add_argument("--web", action="store_true", help="serve the app to a browser")
    parser.add_argument("--host", default="127.0.0.1", help="with --web (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="with --web (default 8000)")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("tune", parents=[common], help="start tuning a workload in a new session")
    p.add_argument(
        "workload",
        help="built-in (resnet18, mobilenet, lstm, dqn, dcgan, conv:C1..C12, dwconv:D1..D9) "
        "or a .onnx / .tflite file",
    )
    p.add_argument("--trials", type=int, default=64, help="trial budget (default 64)")
    p.add_argument("--session", help="session name (default: workload and time)")
    p.add_argument("--shape", action="append", help="pin an input shape: NAME=1x3x224x224")
    p.add_argument("--json", action="store_true", help="one JSON object per event on stdout")
    p.add_argument("--detach", action="store_true", help="start the worker and return")
    p.add_argument("--headless", action="store_true", help="plain live view instead of the app")
    p.add_argument("--cores", type=int, help="cores to tune for (default: all available)")
    p.add_argument(
        "--device", default="local",
        help="local (default), tracker://HOST:PORT/KEY (any free board under KEY) or rpc://HOST:PORT",
    )
    p.add_argument("--target", help="TVM target as JSON, instead of the one the device reports")
    p.add_argument("--batch", type=int, default=32, help="candidates measured per round")
    p.add_argument("--population", type=int, default=256, help="evolutionary population size")
    p.add_argument("--genetic-iters", type=int, default=3, help="evolution iterations per round")
    p.add_argument(
        "--warmup-samples", type=int, default=32, help="samples before the cost model guides"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--variants", default="all",
        help="layout/algorithm variants to search: all (default) or a list of nchw, nchwc "
        "(channel-blocked), winograd; the fastest measured is what export builds",
    )
    p.add_argument(
        "--no-reuse", action="store_true",
        help="do not warm-start from other sessions' records on this chip (they are "
        "measured again here before they count)",
    )
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("resume", parents=[common], help="continue a paused or ended session")
    p.add_argument("name")
    p.add_argument("--trials", type=int, help="measure this many more trials")
    p.add_argument("--json", action="store_true")
    p.add_argument("--detach", action="store_true", help="start the worker and return")
    p.add_argument(
        "--transfer", action="store_true",
        help="on a different chip: re-measure the best records here, then tune on",
    )
    p.add_argument("--transfer-k", type=int, default=8,
                   help="records per task re-measured by --transfer (default 8)")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("attach", parents=[common], help="follow a session live")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.add_argument("--headless", action="store_true", help="plain live view instead of the app")
    p.set_defaults(func=cmd_attach)

    p = sub.add_parser("replay", parents=[common], help="play a saved session (or `demo`)")
    p.add_argument("name")
    p.add_argument("--speed", type=float, default=10.0, help="times real speed (default 10)")
    p.set_defaults(func=cmd_replay)

    for name, func, text in (
        ("pause", cmd_pause, "pause a running worker after its current batch"),
        ("stop", cmd_stop, "stop a running worker after its current batch"),
    ):
        p = sub.add_parser(name, parents=[common], help=text)
        p.add_argument("name")
        p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for it")
        p.set_defaults(func=func)

    p = sub.add_parser("budget", parents=[common], help="set a session's total trial budget")
    p.add_argument("name")
    p.add_argument("trials", type=int)
    p.set_defaults(func=cmd_budget)

    p = sub.add_parser("export", parents=[common], help="compile the tuned model to a library")
    p.add_argument("name")
    p.add_argument("out", help="a .so path, or a directory for model.so + model.json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "bench", parents=[common],
        help="time baselines beside tuned TVM, with a parity check before any speedup",
    )
    p.add_argument("target", help="a session, a built-in workload or a .onnx / .tflite file")
    p.add_argument(
        "--baselines",
        help="comma list of tflite,acl,onnxruntime,openvino,tvm-untuned (default: all); "
        "tvm-tuned is always added when a tuned session exists",
    )
    p.add_argument("--frames", type=int, default=100, help="parity frames (default 100)")
    p.add_argument("--repeats", type=int, default=100, help="timed runs per baseline (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="untimed runs first (default 10)")
    p.add_argument("--threads", type=int, help="threads for every runtime (default: all cores)")
    p.add_argument("--tolerance", type=float, default=1e-4, help="parity tolerance (default 1e-4)")
    p.add_argument("--inputs", help="folder of .npy (or .npz) input frames instead of seeded ones")
    p.add_argument("--seed", type=int, default=0, help="seed of the random frames")
    p.add_argument(
        "--max-seconds", type=float, default=10.0,
        help="cap on timed seconds per baseline; slow ones get fewer runs (at least 5)",
    )
    p.add_argument("--armnn-delegate", help="path of libarmnnDelegate.so (acl baseline)")
    p.add_argument("--shape", action="append", help="pin an input shape: NAME=1x3x224x224")
    p.add_argument("--no-save", action="store_true", help="do not store results in the session")
    p.add_argument("--json", action="store_true", help="one JSON object with `baselines`")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("devices", help="this machine's target and chip fingerprint; trackers")
    p.add_argument("--tracker", help="HOST:PORT of a TVM RPC tracker: list its keys")
    p.add_argument("--key", help="with --tracker: also read one board's fingerprint")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("sessions", parents=[common], help="list, show or remove sessions")
    p.add_argument("action", choices=["list", "show", "rm"])
    p.add_argument("name", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sessions)

    p = sub.add_parser("zoo", help="built-in workloads: list, show a card, export files")
    p.add_argument("action", choices=["list", "show", "export"])
    p.add_argument("name", nargs="?")
    p.add_argument("dir", nargs="?", help="with export: where to write the model files")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_zoo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse prints its own one-line usage error
        return 2 if exc.code not in (0, None) else 0
    try:
        if not getattr(args, "command", None):
            args.sessions_dir = None
            return cmd_app(args)
        return args.func(args)
    except UserError as exc:
        print(f"tvmtui: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - an internal failure, still one line
        print(f"tvmtui: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
