"""Shared helpers: run the real `tvmtui` CLI in subprocesses against a temporary store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tvmtui.sessions.store import Session


class Cli:
    def __init__(self, root: Path):
        self.root = root
        self.env = dict(os.environ, TVMTUI_SESSIONS=str(root), PYTHONUNBUFFERED="1")

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "tvmtui", *args],
            env=self.env, capture_output=True, text=True, timeout=timeout,
        )

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "tvmtui", *args],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def json_lines(self, out: str) -> list[dict]:
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def session(self, name: str) -> Session:
        return Session.open(self.root, name)

    def wait_for(self, name: str, predicate, timeout: float = 300) -> Session:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if (self.root / name / "session.sqlite").exists():
                s = self.session(name)
                if predicate(s):
                    return s
                s.close()
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting on session {name}")


@pytest.fixture
def cli(tmp_path) -> Cli:
    return Cli(tmp_path / "sessions")


@pytest.fixture(autouse=True)
def _own_config(tmp_path, monkeypatch):
    """No test sees the user's saved trackers (`~/.config/tvmtui`)."""
    monkeypatch.setenv("TVMTUI_CONFIG", str(tmp_path / "config"))
