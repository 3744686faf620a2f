"""Where tvmtui keeps its files, in one place every package may use.

- `cache_root()`: `$TVMTUI_CACHE`, else `~/.cache/tvmtui`; regenerated freely. It holds the
  zoo's generated model files (`zoo/`), untuned and tuned builds the bench times
  (`builds/`) and what LLVM said of this CPU (`llvm-host.json`).
- `config_dir()`: `$TVMTUI_CONFIG`, else `~/.config/tvmtui` (the trackers the user added).
- `sessions_root()`: `--sessions-dir`, else `$TVMTUI_SESSIONS`, else `./sessions`.
- `assets_dir()`: the bundled, read-only demo session.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tvmtui.core.errors import UserError


def cache_root() -> Path:
    return Path(os.environ.get("TVMTUI_CACHE") or Path.home() / ".cache" / "tvmtui")


def zoo_dir() -> Path:
    """The generated network files (`workloads/nets.py`), one folder per generator."""
    return cache_root() / "zoo"


def builds_dir() -> Path:
    """Compiled libraries the bench reuses (`baselines/builds.py`)."""
    return cache_root() / "builds"


def llvm_facts_file() -> Path:
    """What LLVM reported of this CPU, per TVM build and CPU (`devices/fingerprint.py`)."""
    return cache_root() / "llvm-host.json"


def config_dir() -> Path:
    return Path(os.environ.get("TVMTUI_CONFIG") or Path.home() / ".config" / "tvmtui")


def sessions_root(cli_value: str | None = None) -> Path:
    """`--sessions-dir`, else `$TVMTUI_SESSIONS`, else `./sessions` (refused when it is
    a file, or under one)."""
    root = Path(cli_value or os.environ.get("TVMTUI_SESSIONS") or "sessions")
    for path in (root, *root.parents):
        if path.exists() and not path.is_dir():
            raise UserError(f"the sessions folder {root} cannot be used: {path} is a file; "
                            "pass another --sessions-dir (or $TVMTUI_SESSIONS)")
    return root


DEMO_NAME = "demo"


def assets_dir() -> Path:
    """The `assets/` folder holding the bundled, read-only demo session: the source tree's,
    or the one an installed wheel put under `sys.prefix/share/tvmtui`."""
    source = Path(__file__).resolve().parents[2] / "assets"
    if (source / DEMO_NAME).is_dir():
        return source
    return Path(sys.prefix) / "share" / "tvmtui" / "assets"
