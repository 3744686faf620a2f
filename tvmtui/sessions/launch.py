"""Create sessions and start detached workers for them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tvmtui.core.errors import UserError
from tvmtui.sessions import catalog
from tvmtui.sessions import store as st
from tvmtui.workloads.loader import Workload


def default_name(workload: Workload) -> str:
    """A valid session name from any model file name (ASCII, no '..', not too long)."""
    slug = "".join(c if (c.isascii() and c.isalnum()) or c in "_-" else "-" for c in workload.name)
    slug = "-".join(part for part in slug.split("-") if part)[:60]
    return st.check_name(f"{slug or 'model'}-{time.strftime('%Y%m%d-%H%M%S')}")


def check_minutes(minutes: float | None, zero_ok: bool = False) -> None:
    """A time budget is a positive number of minutes (on resume, 0 removes it)."""
    if minutes is None or (zero_ok and minutes == 0):
        return
    if not 0 < minutes < float("inf"):
        raise UserError(f"--minutes must be a positive number of minutes (got {minutes:g})")


def create_session(
    root: Path, name: str, workload: Workload, target: dict, budget: int, options: dict,
    device: dict | None = None, fingerprint: dict | None = None,
) -> st.Session:
    """A new session folder holding the model, its metadata and an empty history. The
    device defaults to the local CPU, the fingerprint to this machine's."""
    from tvmtui.kernels.tvm_env import versions

    if fingerprint is None:
        from tvmtui.devices.fingerprint import this_fingerprint

        fingerprint = this_fingerprint().to_json()
    if budget < 1:
        raise UserError(f"--trials must be at least 1 (got {budget})")
    check_minutes(options.get("minutes"))
    from tvmtui.graph.variants import REWRITE_REVISION, VARIANTS

    # New sessions search every layout/algorithm variant unless told otherwise, rewritten
    # as this tvmtui does (kept: a later tvmtui prepares the session the same way).
    options = dict(options, variants=list(options.get("variants") or VARIANTS),
                   rewrite=REWRITE_REVISION)
    # ... and warm-start from other sessions' records on this chip, re-measured here.
    options.setdefault("reuse", True)
    session = st.Session.create(
        root,
        name,
        {
            "status": "created",
            "workload": workload.meta(),
            "target": target,
            "budget": budget,
            "options": options,
            "versions": versions(),
            "device": device or {"kind": "local"},
            "fingerprint": fingerprint,
        },
    )
    session.file(st.model_file(workload.meta())).write_bytes(workload.model_bytes)
    return session


def spawn_worker(session: st.Session) -> int:
    """Start the worker detached from this terminal (its own session, no stdin).

    A dropped SSH link (SIGHUP to the terminal's process group) does not reach it.
    """
    log = open(session.file(st.WORKER_LOG), "ab")
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tvmtui.tuning.worker", str(session.path.resolve())],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
        env=env,
    )
    log.close()
    session.set_meta(pid=proc.pid)
    return proc.pid


def wait_for_lock(session: st.Session, pid: int, timeout: float = 20.0) -> bool:
    """Wait until the worker holds the session lock (or has already exited)."""
    import psutil

    deadline = time.time() + timeout
    while time.time() < deadline:
        if session.worker_alive():
            return True
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            return False
        time.sleep(0.05)
    return session.worker_alive()


def same_chip_sessions(root: Path, graph_hash: str | None, target: dict,
                       fingerprint_id: str) -> list:
    """Sessions that tuned this graph (None: any graph) for this target on this very chip."""
    found, _ = catalog.list_sessions(root)
    out = []
    for summary in found:
        if summary.target != target or summary.bundled:
            continue
        if graph_hash is not None and summary.graph_hash != graph_hash:
            continue
        try:
            session = st.Session.open(root, summary.name)
            fp = (session.meta().get("fingerprint") or {}).get("id")
            session.close()
        except UserError:
            continue
        if fp == fingerprint_id:
            out.append(summary)
    return out


def best_same_chip_session(root: Path, graph_hash: str, target: dict) -> st.Session | None:
    """The session that tuned this graph for this target on this very chip and reached the
    lowest latency (a tune from another chip is not this chip's tuned build)."""
    from tvmtui.devices.fingerprint import this_fingerprint
    from tvmtui.sessions.msdb import count_records

    hits = [
        s for s in same_chip_sessions(root, graph_hash, target, this_fingerprint().id)
        if s.best_ms is not None and count_records(root / s.name / st.RECORD_DB) > 0
    ]
    if not hits:
        return None
    best = min(hits, key=lambda s: s.best_ms)
    return st.Session.open(st.resolve_root(root, best.name), best.name)
