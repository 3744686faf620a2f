"""Starting and controlling workers: tune, resume (and chip transfer), attach, pause, stop, budget."""

from __future__ import annotations

import sys
import time

from tvmtui import fmt
from tvmtui.commands.common import (
    check_writable,
    interactive,
    open_session,
    print_json,
    run_app,
    sessions_dir,
)
from tvmtui.commands.follow import follow
from tvmtui.core.errors import UserError
from tvmtui.sessions import store as st

TERMINAL = ("finished", "stopped", "failed", "crashed")


def cmd_tune(args) -> int:
    from tvmtui.devices.local import describe_target
    from tvmtui.sessions.launch import check_minutes, create_session, default_name, spawn_worker
    from tvmtui.workloads import load_workload

    if args.trials < 1:
        raise UserError(f"--trials must be at least 1 (got {args.trials})")
    check_minutes(args.minutes)
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
    for note in workload.notices:
        print(f"note: {note}", file=sys.stderr)
    name = name or default_name(workload)
    root = sessions_dir(args)
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
        "minutes": args.minutes,
    }
    session = create_session(root, name, workload, target, args.trials, options,
                             device=resolved.device.to_json(), fingerprint=resolved.fingerprint)
    pid = spawn_worker(session)
    _started(session, pid)
    if not args.json:
        print(
            f"session {name}: tuning {workload.name} on {describe_target(target)} "
            f"via {resolved.device.url()} ({args.trials} trials"
            + (f" or {args.minutes:g} min" if args.minutes else "") + f"), worker pid {pid}",
            file=sys.stderr,
        )
    if args.detach:
        if args.json:
            print_json({"session": name, "pid": pid})
        return 0
    if interactive(args):
        return run_app(args, start="live", session=name)
    return follow(session, args.json)


def _started(session: st.Session, pid: int) -> None:
    """Wait for the new worker to take the session's lock; fail clearly if it died first."""
    from tvmtui.sessions.launch import wait_for_lock

    if not wait_for_lock(session, pid) and session.status() not in TERMINAL:
        raise RuntimeError(
            f"the worker for {session.name!r} exited before it started; "
            f"see {session.file(st.WORKER_LOG)}"
        )


def cmd_resume(args) -> int:
    from tvmtui.sessions.launch import check_minutes, spawn_worker

    if args.transfer_k < 1:
        raise UserError(f"--transfer-k must be at least 1 (got {args.transfer_k})")

    check_minutes(args.minutes, zero_ok=True)
    check_writable(args, args.name)
    session = open_session(args, args.name)
    meta = session.meta()
    done = int(meta.get("trials", 0))
    history = session.events(0)
    after = history[-1]["seq"] if history else 0
    if session.worker_alive():
        if args.trials:
            session.send("budget", done + args.trials)
        if args.minutes is not None:
            session.send("minutes", args.minutes)  # from now
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
    if args.minutes is not None:
        session.set_meta(options=dict(meta.get("options") or {}, minutes=args.minutes or None))
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
    session = open_session(args, args.name)
    if interactive(args):
        session.close()
        return run_app(args, start="live", session=args.name)
    return follow(session, args.json)


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
    session = open_session(args, args.name)
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
    session = open_session(args, args.name)
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
    check_writable(args, args.name)
    session = open_session(args, args.name)
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
