"""MetaSchedule's JSON database files: repair a tail cut short by a crash."""

from __future__ import annotations

import json
import os
from pathlib import Path


def repair_json_lines(path: Path) -> int:
    """Drop lines that are not complete JSON (a write cut short by a crash).

    Stock TVM refuses to load such a file. The original is kept beside it as
    `<name>.broken` so nothing is lost. Returns how many lines were dropped.
    """
    if not path.exists():
        return 0
    raw = path.read_bytes()
    good: list[bytes] = []
    dropped = 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            json.loads(line)
        except ValueError:
            dropped += 1
            continue
        good.append(line)
    if dropped == 0 and (not raw or raw.endswith(b"\n")):
        return 0
    if dropped:  # every repair keeps its original: .broken, .broken.1, ...
        n = 0
        while (kept := path.with_name(path.name + ".broken" + (f".{n}" if n else ""))).exists():
            n += 1
        _write_synced(kept, raw)
    tmp = path.with_name(path.name + ".tmp")
    _write_synced(tmp, b"".join(line + b"\n" for line in good))
    os.replace(tmp, path)
    _sync_dir(path.parent)
    return dropped


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def count_records(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(1 for line in path.read_bytes().splitlines() if line.strip())


def confirmed_is_current(session) -> bool:
    """Whether the session's confirmed records (see `tuning/confirm.py`) were picked after
    its last trial: a resume that tuned on makes them stale until confirmed again."""
    from tvmtui.sessions import store as st

    meta = session.meta()
    done = meta.get("confirmed_trials")
    return (done is not None and int(done) == int(meta.get("trials", 0))
            and count_records(session.file(st.CONFIRMED_RECORD_DB)) > 0)


def tuned_database(session):
    """The database export and bench compile with: the confirmed records first (where
    current), then every tuning record."""
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.sessions import store as st

    def open_db(workloads: str, records: str):
        return ms.database.JSONDatabase(
            path_workload=str(session.file(workloads)),
            path_tuning_record=str(session.file(records)),
            module_equality="structural",
        )

    main = open_db(st.WORKLOAD_DB, st.RECORD_DB)
    if not confirmed_is_current(session):
        return main
    confirmed = open_db(st.CONFIRMED_WORKLOAD_DB, st.CONFIRMED_RECORD_DB)
    return ms.database.OrderedUnionDatabase(confirmed, main)
