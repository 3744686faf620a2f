"""Running `tvmtui` commands from the app, in a background worker, with a one-line error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


class WorkerExit(Exception):
    """A subprocess the app started failed; its message is for the user."""


def run_cli(args: list[str], root: Path, timeout: float = 3600) -> str:
    """Run a `tvmtui` subcommand in a subprocess (heavy TVM work stays off the UI)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tvmtui", *args, "--sessions-dir", str(root)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise WorkerExit(f"`tvmtui {args[0]}` gave no answer in {timeout:.0f} s and was "
                         "stopped; try it from a terminal to see why") from None
    except OSError as exc:
        raise WorkerExit(f"`tvmtui {args[0]}` could not start: {exc}") from None
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise WorkerExit(lines[-1] if lines else f"exit code {proc.returncode}")
    return proc.stdout

