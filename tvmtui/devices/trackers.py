"""Trackers the user added (the app's device list), kept in `$TVMTUI_CONFIG/trackers.json`
(default `~/.config/tvmtui/trackers.json`)."""

from __future__ import annotations

import json

from tvmtui.core.paths import config_dir
from tvmtui.devices.rpc import parse_hostport


def saved_trackers() -> list[str]:
    path = config_dir() / "trackers.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [t for t in data if isinstance(t, str)] if isinstance(data, list) else []


def add_tracker(address: str) -> str:
    """Validate `HOST:PORT` and remember it; returns the normalised address."""
    host, port = parse_hostport(address.strip())
    address = f"{host}:{port}"
    trackers = saved_trackers()
    if address not in trackers:
        trackers.append(address)
        config_dir().mkdir(parents=True, exist_ok=True)
        (config_dir() / "trackers.json").write_text(json.dumps(trackers, indent=1) + "\n")
    return address
