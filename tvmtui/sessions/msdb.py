"""MetaSchedule's JSON database files: repair a tail cut short by a crash, and load around
records whose trace no longer replays."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tvmtui.kernels.hazards import layout_rewrite_hazard, rewrites_layout

FAILED_RUN_S = 1e9  # MetaSchedule records a candidate that failed to run as 1e10 seconds


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
    _replace_lines(path, good)
    return dropped


def _replace_lines(path: Path, lines: list[bytes]) -> None:
    """Rewrite `path` to hold `lines`, atomically and synced."""
    tmp = path.with_name(path.name + ".tmp")
    _write_synced(tmp, b"".join(line + b"\n" for line in lines))
    os.replace(tmp, path)
    _sync_dir(path.parent)


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


def workload_hashes(path: Path) -> set[str]:
    """The structural hashes of the workloads a database file holds (each line's first
    field), as `tuning/schedules.module_hash` writes them, read without loading the database:
    loading replays every record's trace, 65 s for the 11 compare sessions here, before a
    new session's first trial."""
    return {key for _, key, _ in _workload_lines(path)}


def _workload_lines(path: Path):
    """(line index, structural hash as `tuning/schedules.module_hash` writes it, the line's JSON)
    of each workload in a database file; a line cut short by a crash is passed over (the
    load repairs it)."""
    if not path.exists():
        return
    for index, line in enumerate(path.read_bytes().splitlines()):
        try:
            obj = json.loads(line)
            yield index, format(int(obj[0]), "016x"), obj
        except (ValueError, TypeError, IndexError):
            continue


class BestRecords:
    """The records that ran in a session's database files, per workload in `hashes` (see
    `workload_hashes`), fastest first; read without replaying any, each replayed only
    when `top` hands it out. Loading the whole of a 906-record ResNet-18 session (every
    record replayed) took 20 s, and a new ResNet-18 session beside it waited 54 s for its
    first trial; its 4 best records a task took 4 s for all 44 tasks."""

    def __init__(self, workloads: Path, records: Path, hashes: set[str]):
        self._workloads: dict[str, list] = {}  # hash -> the workload's JSON
        index_of: dict[int, str] = {}
        for index, key, obj in _workload_lines(workloads):
            if key in hashes:
                self._workloads[key], index_of[index] = obj, key
        self._records: dict[str, list] = {key: [] for key in self._workloads}
        for line in records.read_bytes().splitlines() if records.exists() else []:
            try:
                index, record = json.loads(line)
                runs = [float(x) for x in record[1]]
            except (ValueError, TypeError, IndexError):
                continue
            if index in index_of and runs and max(runs) < FAILED_RUN_S:
                self._records[index_of[index]].append((sum(runs) / len(runs), record))
        for found in self._records.values():
            found.sort(key=lambda x: x[0])

    def top(self, key: str, k: int) -> list:
        """The `k` fastest records of workload `key` (a hash) whose trace replays (one that
        does not, as some of ResNet-18's, gives way to the next)."""
        from tvm.s_tir import meta_schedule as ms

        found = self._records.get(key)
        if not found or k <= 0:
            return []
        workload = ms.database.Workload.from_json(self._workloads[key])
        if any(rewrites_layout(record) for _, record in found) and \
                layout_rewrite_hazard(workload.mod):
            found = [(t, r) for t, r in found if not rewrites_layout(r)]  # see `wrong_lines`
        out = []
        for _, record in found:
            try:  # reading a record replays its trace (see `load_database`)
                out.append(ms.database.TuningRecord.from_json(record, workload))
            except Exception:  # noqa: BLE001 - one that does not replay: the next instead
                continue
            if len(out) == k:
                break
        return out


def confirmed_is_current(session) -> bool:
    """Whether the session's confirmed records (see `tuning/confirm.py`) were picked after
    its last trial: a resume that tuned on makes them stale until confirmed again."""
    from tvmtui.sessions import store as st

    meta = session.meta()
    done = meta.get("confirmed_trials")
    return (done is not None and int(done) == int(meta.get("trials", 0))
            and count_records(session.file(st.CONFIRMED_RECORD_DB)) > 0)


# A record that replayed once may fail the next time (the rfactor schedules below): the
# worker sorts its file out again after a load that still fails, this many times in all.
REPLAY_ATTEMPTS = 3


def wrong_lines(workloads: Path, records: Path) -> set[bytes]:
    """The record lines whose schedule is known to compute its kernel wrong: RewriteLayout
    on a task that reads its weight transposed (see `kernels/hazards.py`). Only the
    workloads of records that rewrote a layout are read (126 of them: 0.2 s)."""
    suspects = []
    for line in records.read_bytes().splitlines() if records.exists() else []:
        try:
            index, record = json.loads(line)
        except (ValueError, TypeError):
            continue
        if rewrites_layout(record):
            suspects.append((line, index))
    if not suspects:
        return set()
    from tvm.s_tir import meta_schedule as ms

    workload_json = {index: obj for index, _, obj in _workload_lines(workloads)}
    hazard: dict[int, bool] = {}
    out = set()
    for line, index in suspects:
        if index not in hazard:
            try:
                mod = ms.database.Workload.from_json(workload_json[index]).mod
                hazard[index] = layout_rewrite_hazard(mod) is not None
            except Exception:  # noqa: BLE001 - a workload that does not load: the load says so
                hazard[index] = False
        if hazard[index]:
            out.add(line)
    return out


def _replayable(workloads: Path, records: Path,
                skip: set[bytes] | frozenset = frozenset()) -> tuple[list, list[bytes]]:
    """Split the record lines (but those in `skip`) into those whose trace replayed on its
    workload, as (line, TuningRecord), and the rest. (A replay can fail one time and not
    the next: the record loaded once is the one kept.)"""
    from tvm.s_tir import meta_schedule as ms

    loaded = [ms.database.Workload.from_json(json.loads(line))
              for line in workloads.read_bytes().splitlines() if line.strip()]
    good, bad = [], []
    for line in records.read_bytes().splitlines():
        if not line.strip() or line in skip:
            continue
        try:
            index, record = json.loads(line)
            good.append((line, ms.database.TuningRecord.from_json(record, loaded[index])))
        except Exception:  # noqa: BLE001 - TVM raises what the trace's replay raised
            bad.append(line)
    return good, bad


def _json_database(workloads: Path, records: Path):
    from tvm.s_tir import meta_schedule as ms

    return ms.database.JSONDatabase(path_workload=str(workloads),
                                    path_tuning_record=str(records),
                                    module_equality="structural")


def load_database(workloads: Path, records: Path):
    """MetaSchedule's database of these files, read only -> (database, records left out
    because they do not replay, records left out because they compute wrong).

    TVM replays every record's trace as it loads a JSON database and refuses the whole of
    it when one fails: MobileNet's blocked global pool had 11 rfactor schedules that were
    measured, yet do not replay, and its export failed. Then, or when some records are
    known to compute wrong (`wrong_lines`), the others are loaded into memory, and the
    files are left as they are."""
    from tvm.s_tir import meta_schedule as ms

    wrong = wrong_lines(workloads, records)
    if not wrong:
        try:
            return _json_database(workloads, records), 0, 0
        except Exception:  # noqa: BLE001 - a trace that does not replay; sorted out below
            pass
    good, bad = _replayable(workloads, records, wrong)  # none bad: see `_rewritten`
    db = ms.database.MemoryDatabase(module_equality="structural")
    for _, record in good:
        db.commit_workload(record.workload.mod)
        db.commit_tuning_record(record)
    return db, len(bad), len(wrong)


def _backup(path: Path) -> Path:
    return path.with_name(path.name + ".reloading")


def _rewritten(workloads: Path, records: Path, good: list):
    """The session's JSON database written afresh from `good` (every record, each of which
    replayed on its own). TVM 0.27 replays a JSON database's records in parallel as it
    loads it, and that failed on every try for a finished MobileNet session ("Check
    failed: old_outputs.size() == new_outputs.size()") while each record replayed alone:
    a resume of it failed. The old files are kept as `*.reloading` until the new ones are
    written (restored from there if this is cut short)."""
    from tvm.s_tir import meta_schedule as ms

    for path in (workloads, records):
        os.replace(path, _backup(path))
    db = ms.database.JSONDatabase(path_workload=str(workloads),
                                  path_tuning_record=str(records),
                                  module_equality="structural", allow_missing=True)
    for _, record in good:
        db.commit_workload(record.workload.mod)
        db.commit_tuning_record(record)
    for path in (workloads, records):
        _backup(path).unlink()
    return db


def _set_aside(records: Path, lines: list[bytes] | set[bytes], suffix: str) -> None:
    """Move `lines` out of the record file into `<records><suffix>`, kept there."""
    with open(records.with_name(records.name + suffix), "ab") as fh:
        fh.write(b"".join(line + b"\n" for line in lines))
        fh.flush()
        os.fsync(fh.fileno())
    _replace_lines(records, [line for line in records.read_bytes().splitlines()
                             if line.strip() and line not in lines])


def open_own_database(workloads: Path, records: Path):
    """The session's own JSON database, for its worker (the files' one writer) ->
    (database, records set aside as unreplayable, as wrong). Record lines whose trace
    does not replay (see `load_database`) move to `<records>.unreplayable`, those known
    to compute wrong (`wrong_lines`) to `<records>.wrong`, both kept; the rest load."""
    moved = 0
    for backup in (_backup(workloads), _backup(records)):  # a rewrite cut short
        if backup.exists():
            os.replace(backup, backup.with_name(backup.name.removesuffix(".reloading")))
    wrong = wrong_lines(workloads, records)
    if wrong:
        _set_aside(records, wrong, ".wrong")
    for _ in range(REPLAY_ATTEMPTS - 1):
        try:
            return _json_database(workloads, records), moved, len(wrong)
        except Exception:  # noqa: BLE001 - a trace that does not replay; sorted out below
            good, bad = _replayable(workloads, records)
            if not bad:
                return _rewritten(workloads, records, good), moved, len(wrong)
        _set_aside(records, set(bad), ".unreplayable")
        moved += len(bad)
    return _json_database(workloads, records), moved, len(wrong)


def tuned_database(session):
    """The database export and bench compile with: the confirmed records first (where
    current), then every tuning record -> (database, records left out as unreplayable,
    as wrong: see `load_database`)."""
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.sessions import store as st

    main, left_out, wrong = load_database(session.file(st.WORKLOAD_DB),
                                          session.file(st.RECORD_DB))
    if not confirmed_is_current(session):
        return main, left_out, wrong
    confirmed, more, more_wrong = load_database(session.file(st.CONFIRMED_WORKLOAD_DB),
                                                session.file(st.CONFIRMED_RECORD_DB))
    return (ms.database.OrderedUnionDatabase(confirmed, main), left_out + more,
            wrong + more_wrong)
