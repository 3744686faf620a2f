"""The sessions under a folder: listing them (with the bundled demo) and removing one."""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
from pathlib import Path

from tvmtui.core.errors import UserError
from tvmtui.core.paths import DEMO_NAME
from tvmtui.sessions.store import (
    DB_FILE,
    LOCK_FILE,
    Session,
    SessionSummary,
    check_name,
    resolve_root,
)


def list_sessions(root: Path) -> tuple[list[SessionSummary], list[tuple[str, str]]]:
    """Every session under `root`, newest first, then the bundled demo (unless `root` has
    its own `demo`), plus (name, error) for unreadable ones."""
    found: list[SessionSummary] = []
    broken: list[tuple[str, str]] = []
    places = [(p, root) for p in sorted(root.iterdir())] if root.is_dir() else []
    demo_root = resolve_root(root, DEMO_NAME)
    if demo_root != root:
        places.append((demo_root / DEMO_NAME, demo_root))
    for path, where in places:
        if not (path / DB_FILE).is_file():
            continue
        try:
            session = Session.open(where, path.name)
        except UserError as exc:
            broken.append((path.name, str(exc)))
            continue
        try:
            found.append(session.summary(bundled=where != root))
        except (UserError, sqlite3.DatabaseError, KeyError, ValueError) as exc:
            broken.append((path.name, f"session {path.name!r} is corrupted ({exc})"))
        finally:
            session.close()
    found.sort(key=lambda s: (s.bundled, -s.updated))
    return found, broken


def remove_session(root: Path, name: str) -> None:
    check_name(name)
    if resolve_root(root, name) != root:
        raise UserError("the bundled demo session is read-only; it cannot be removed")
    path = root / name
    if not path.is_dir():
        raise UserError(f"no session {name!r} in {root}")
    if not (path / DB_FILE).exists():
        raise UserError(f"{path} is not a tvmtui session (no {DB_FILE}); not removing it")
    # Removing is a write: hold the worker's lock throughout, so no worker starts on the
    # session while it goes; the folder is renamed away (atomic) before it is deleted.
    with open(path / LOCK_FILE, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UserError(
                f"session {name!r} has a running worker; `tvmtui stop {name}` first"
            ) from None
        doomed = root / f".removing-{name}-{os.getpid()}"
        os.rename(path, doomed)
    shutil.rmtree(doomed)
