"""The interactive app from the command line: replay, --web, and the app itself."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tvmtui.commands.common import open_session, run_app
from tvmtui.core.errors import UserError


def cmd_replay(args) -> int:
    if not args.speed > 0 or args.speed == float("inf"):  # also nan
        raise UserError(f"--speed must be a positive number (got {args.speed})")
    open_session(args, args.name).close()  # a clear error now, not inside the app
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
    # Our own page: textual-serve's links a web font from Google, and boards are often offline.
    page = Path(__file__).resolve().parents[1] / "tui" / "web"
    Server(f"{sys.executable} -m tvmtui", host=host, port=port, title="tvmtui",
           templates_path=page).serve()
    return 0


def cmd_app(args) -> int:
    if getattr(args, "web", False):
        return serve_web(args.host, args.port)
    # textual-serve (`--web`) runs the app through pipes with its web driver named in
    # TEXTUAL_DRIVER: no terminal, and none needed.
    if not sys.stdout.isatty() and not os.environ.get("TEXTUAL_DRIVER"):
        raise UserError("the app needs a terminal; see `tvmtui --help` for headless commands")
    return run_app(args, start="launch")
