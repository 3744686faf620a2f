"""Helpers every command shares: the sessions folder, opening sessions, JSON output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tvmtui.core.errors import UserError
from tvmtui.core.paths import sessions_root
from tvmtui.sessions import store as st


def sessions_dir(args) -> Path:
    """The sessions folder the command works in (--sessions-dir, $TVMTUI_SESSIONS, ./sessions)."""
    return sessions_root(args.sessions_dir)


def open_session(args, name: str) -> st.Session:
    """Session `name` (the bundled demo included)."""
    root = sessions_dir(args)
    return st.Session.open(st.resolve_root(root, name), name)


def check_writable(args, name: str) -> None:
    if st.resolve_root(sessions_dir(args), name) != sessions_dir(args):
        raise UserError(
            f"{name!r} is the bundled demo (read-only): replay it with `tvmtui replay {name}`"
        )


def print_json(obj) -> None:
    print(json.dumps(obj), flush=True)


def interactive(args) -> bool:
    """The app runs on a terminal unless --json or --headless asks for the plain stream."""
    return not (args.json or getattr(args, "headless", False)) and sys.stdout.isatty()


def run_app(args, start: str = "launch", session: str | None = None, speed: float = 10.0) -> int:
    from tvmtui.tui.app import TvmTuiApp

    TvmTuiApp(sessions_dir(args), start=start, session=session, speed=speed).run()
    return 0
