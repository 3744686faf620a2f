"""One folder per session; an SQLite file (WAL) holds metadata, events and control commands.

The worker is the only writer of events and metadata; any number of readers, in other
processes, follow the event stream by sequence number. Other processes send commands
(pause, stop, budget) through the `control` table. Nothing here executes code from disk.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tvmtui.core.errors import UserError
from tvmtui.core.paths import DEMO_NAME, assets_dir

DB_FILE = "session.sqlite"
LOCK_FILE = "worker.lock"
MODEL_FILES = {"onnx": "model.onnx", "tflite": "model.tflite"}


def model_file(workload_meta: dict) -> str:
    """The session's copy of its model: `model.onnx` or `model.tflite`."""
    return MODEL_FILES[workload_meta.get("format", "onnx")]

WORKLOAD_DB = "database_workload.json"
RECORD_DB = "database_tuning_record.json"
COST_MODEL_FILE = "cost_model.json"
# Each heavy task's record that measured fastest again once tuning was done (confirm.py).
CONFIRMED_WORKLOAD_DB = "confirmed_workload.json"
CONFIRMED_RECORD_DB = "confirmed_tuning_record.json"
WORKER_LOG = "worker.log"
DEVICE_LOG = "devices.jsonl"  # which board measured which candidate (RPC runner hooks)

LIVE_STATES = ("starting", "running", "paused")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL,
    event TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS control (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL,
    command TEXT NOT NULL,
    arg TEXT
);
CREATE TABLE IF NOT EXISTS traces (trial INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cm_samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    group_hash TEXT NOT NULL,
    cost REAL NOT NULL,
    rows INTEGER NOT NULL,
    cols INTEGER NOT NULL,
    features BLOB NOT NULL
);
"""


def resolve_root(root: Path, name: str) -> Path:
    """Where session `name` lives: `root`, or the assets folder for the bundled demo."""
    if name == DEMO_NAME and not (root / name).exists() and (assets_dir() / name).is_dir():
        return assets_dir()
    return root


def check_name(name: str) -> str:
    if not _NAME_RE.match(name) or ".." in name:
        raise UserError(
            f"bad session name {name!r}: use letters, digits, '.', '_' or '-' "
            "(no '/', no '..', at most 80 characters)"
        )
    return name


@dataclass(frozen=True)
class SessionSummary:
    """The row a session gets in listings (`sessions list --json`)."""

    name: str
    status: str
    workload: str
    graph_hash: str
    target: dict
    trials: int
    budget: int
    best_ms: float | None
    updated: float
    created: float
    error: str | None = None
    bundled: bool = False  # the read-only demo shipped in assets/
    speedup: dict | None = None  # the last `tvmtui bench` summary: vs, speedup, tvm_ms
    pinned: dict | None = None  # input shapes the user pinned with --shape

    def to_json(self) -> dict:
        return dict(self.__dict__)


class Session:
    """A session folder and its SQLite store. Open one per process (or per thread)."""

    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self.name = path.name
        self._conn = conn

    # ---- opening -------------------------------------------------------------------
    @staticmethod
    def _connect(db: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(str(db), timeout=10.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=10000")
        return conn

    @classmethod
    def create(cls, root: Path, name: str, meta: dict) -> Session:
        check_name(name)
        path = root / name
        if path.exists():
            raise UserError(
                f"session {name!r} already exists in {root}; pick another --session name, "
                f"or `tvmtui resume {name}`"
            )
        path.mkdir(parents=True)
        conn = cls._connect(path / DB_FILE)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(_SCHEMA)
        session = cls(path, conn)
        now = time.time()
        session.set_meta(name=name, created=now, updated=now, trials=0, best_ms=None, **meta)
        return session

    @classmethod
    def open(cls, root: Path, name: str) -> Session:
        check_name(name)
        path = root / name
        db = path / DB_FILE
        if not path.is_dir():
            raise UserError(f"no session {name!r} in {root}; `tvmtui sessions list` shows them")
        if not db.is_file():
            raise UserError(f"{path} is not a tvmtui session (no {DB_FILE})")
        try:
            conn = cls._connect(db)
            conn.executescript(_SCHEMA)  # no-op on a current session; adds newer tables
            conn.execute("SELECT key, value FROM meta LIMIT 1").fetchall()
            conn.execute("SELECT seq FROM events ORDER BY seq DESC LIMIT 1").fetchall()
        except sqlite3.DatabaseError as exc:
            raise UserError(
                f"session {name!r} is corrupted ({DB_FILE}: {exc}); "
                f"remove it with `tvmtui sessions rm {name}`"
            ) from None
        session = cls(path, conn)
        try:
            meta = session.meta()
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise UserError(f"session {name!r} is corrupted (metadata: {exc})") from None
        for key in ("workload", "target", "budget"):
            if key not in meta:
                raise UserError(f"session {name!r} is corrupted (metadata has no {key!r})")
        return session

    def close(self) -> None:
        self._conn.close()

    # ---- files ---------------------------------------------------------------------
    def file(self, name: str) -> Path:
        return self.path / name

    # ---- metadata ------------------------------------------------------------------
    def meta(self) -> dict:
        rows = self._conn.execute("SELECT key, value FROM meta").fetchall()
        return {k: json.loads(v) for k, v in rows}

    def set_meta(self, **values) -> None:
        rows = [(k, json.dumps(v)) for k, v in values.items()]
        with self._transaction():
            self._conn.executemany(
                "INSERT INTO meta(key, value) VALUES(?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                rows,
            )

    # ---- events --------------------------------------------------------------------
    def append(self, event: str, data: dict, t: float | None = None) -> int:
        """Append one event; returns its sequence number."""
        t = time.time() if t is None else t
        with self._transaction():
            cur = self._conn.execute(
                "INSERT INTO events(t, event, data) VALUES(?, ?, ?)",
                (t, event, json.dumps(data)),
            )
            self._conn.execute(
                "INSERT INTO meta(key, value) VALUES('updated', ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (json.dumps(t),),
            )
        return int(cur.lastrowid or 0)

    def append_many(
        self,
        events: list[tuple[str, dict]],
        meta: dict | None = None,
        traces: list[tuple[int, str]] | None = None,
    ) -> None:
        """Append several events (and metadata, trial traces) in one transaction."""
        t = time.time()
        with self._transaction():
            if traces:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO traces(trial, text) VALUES(?, ?)", traces
                )
            self._conn.executemany(
                "INSERT INTO events(t, event, data) VALUES(?, ?, ?)",
                [(t, e, json.dumps(d)) for e, d in events],
            )
            values = dict(meta or {}, updated=t)
            self._conn.executemany(
                "INSERT INTO meta(key, value) VALUES(?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                [(k, json.dumps(v)) for k, v in values.items()],
            )

    def events(self, after: int = 0, limit: int | None = None) -> list[dict]:
        """Events with sequence number > `after`, oldest first, as contract objects."""
        sql = "SELECT seq, t, event, data FROM events WHERE seq > ? ORDER BY seq"
        args: tuple = (after,)
        if limit is not None:
            sql += " LIMIT ?"
            args = (after, limit)
        out = []
        for seq, t, event, data in self._conn.execute(sql, args).fetchall():
            obj = {"event": event, "t": t, "seq": seq}
            obj.update(json.loads(data))
            out.append(obj)
        return out

    def iter_events(self, *kinds: str) -> Iterator[dict]:
        """Events of these kinds, in order."""
        marks = ",".join("?" * len(kinds))
        for seq, t, event, data in self._conn.execute(
            f"SELECT seq, t, event, data FROM events WHERE event IN ({marks}) ORDER BY seq", kinds
        ):
            obj = {"event": event, "t": t, "seq": seq}
            obj.update(json.loads(data))
            yield obj

    def count_events(self, kind: str | None) -> int:
        """How many events of one kind (or of any kind, for None)."""
        if kind is None:
            (n,) = self._conn.execute("SELECT COUNT(*) FROM events").fetchone()
        else:
            (n,) = self._conn.execute(
                "SELECT COUNT(*) FROM events WHERE event = ?", (kind,)
            ).fetchone()
        return int(n)

    def trace(self, trial: int) -> str | None:
        """The schedule trace (TVM's Python form) of one trial, if recorded."""
        try:
            row = self._conn.execute("SELECT text FROM traces WHERE trial = ?", (trial,)).fetchone()
        except sqlite3.OperationalError:  # a session from before traces were kept
            return None
        return row[0] if row else None

    # ---- control -------------------------------------------------------------------
    def send(self, command: str, arg=None) -> int:
        with self._transaction():
            cur = self._conn.execute(
                "INSERT INTO control(t, command, arg) VALUES(?, ?, ?)",
                (time.time(), command, json.dumps(arg)),
            )
        return int(cur.lastrowid or 0)

    def commands(self, after: int = 0) -> list[tuple[int, str, object]]:
        rows = self._conn.execute(
            "SELECT id, command, arg FROM control WHERE id > ? ORDER BY id", (after,)
        ).fetchall()
        return [(i, c, json.loads(a) if a is not None else None) for i, c, a in rows]

    def last_command_id(self) -> int:
        (n,) = self._conn.execute("SELECT COALESCE(MAX(id), 0) FROM control").fetchone()
        return int(n)

    # ---- cost-model samples (plain float32 bytes, never pickles) --------------------
    def add_samples(self, rows: list[tuple[str, float, bytes, int, int]]) -> None:
        with self._transaction():
            self._conn.executemany(
                "INSERT INTO cm_samples(group_hash, cost, features, rows, cols) "
                "VALUES(?, ?, ?, ?, ?)",
                rows,
            )

    def samples(self) -> list[tuple[str, float, bytes, int, int]]:
        return self._conn.execute(
            "SELECT group_hash, cost, features, rows, cols FROM cm_samples ORDER BY id"
        ).fetchall()

    # ---- liveness --------------------------------------------------------------------
    def worker_alive(self) -> bool:
        """True while a worker process holds this session's lock. Readers only look: taking
        the lock, even for a moment, would turn a worker starting then away."""
        return lock_held(self.path / LOCK_FILE)

    def status(self, meta: dict | None = None) -> str:
        """The stored status, or `crashed` when a live status has no worker behind it."""
        meta = self.meta() if meta is None else meta
        status = meta.get("status", "unknown")
        if status in LIVE_STATES and not self.worker_alive():
            return "crashed"
        return status

    def summary(self, bundled: bool = False) -> SessionSummary:
        meta = self.meta()
        return SessionSummary(
            name=self.name,
            status=self.status(meta),
            workload=meta["workload"]["name"],
            graph_hash=meta["workload"]["graph_hash"],
            target=meta["target"],
            trials=int(meta.get("trials", 0)),
            budget=int(meta.get("budget", 0)),
            best_ms=meta.get("best_ms"),
            updated=float(meta.get("updated", 0.0)),
            created=float(meta.get("created", 0.0)),
            error=meta.get("error"),
            bundled=bundled,
            speedup=meta.get("bench"),
            pinned=meta["workload"].get("pinned") or None,
        )

    # ---- helpers ---------------------------------------------------------------------
    def _transaction(self):
        return _Tx(self._conn)


class _Tx:
    """BEGIN IMMEDIATE ... COMMIT, so writers queue instead of failing mid-transaction."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


def lock_held(lock: Path) -> bool:
    """Does some process hold an flock on `lock`? Read from /proc/locks (no lock taken);
    elsewhere, whether the pid the worker wrote into it is alive."""
    try:
        st_ = os.stat(lock)
    except OSError:
        return False
    try:
        with open("/proc/locks") as fh:
            table = fh.read()
    except OSError:
        try:
            pid = int(lock.read_text().strip() or 0)
        except (OSError, ValueError):
            return False
        import psutil

        return pid > 0 and psutil.pid_exists(pid)
    dev = f"{os.major(st_.st_dev):02x}:{os.minor(st_.st_dev):02x}:{st_.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5309410 0 EOF" ("->" marks a waiter)
        if len(fields) >= 6 and fields[1] == "FLOCK" and "->" not in fields[:2] and \
                fields[5] == dev:
            return True
    return False
