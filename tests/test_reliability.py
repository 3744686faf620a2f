"""The short version of `benchmarks/reliability.py`: kill -9 at random moments of tune and
resume with a follower that hangs up, then a full disk (a small tmpfs, as root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reliability.py"


@pytest.mark.slow  # over a minute: `.ci/run` runs `-m slow`
def test_kills_lose_nothing_and_measure_nothing_twice(tmp_path):
    out = tmp_path / "reliability.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "2", "--trials", "24",
                          "--no-boards", "--seed", "1", "--out", str(out)],
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["survived"] == report["rounds"] == 2, report
    assert report["killed"] >= 1
    assert report["streamed_but_lost"] == 0 and report["measured_twice"] == 0, report
    assert report["resumable_at_end"] and report["trials_stored"] > 0
    disk = report["full_disk"]
    if os.geteuid() == 0:  # mounting the small tmpfs needs root
        assert disk.get("clear") and disk["exit"] != 0, disk
        assert len(disk["message"].splitlines()) == 1
