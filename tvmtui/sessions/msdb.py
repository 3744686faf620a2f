"""MetaSchedule's JSON database files: repair a tail cut short by a crash."""

from __future__ import annotations

import json
import os
from pathlib import Path


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
    if dropped:
        path.with_name(path.name + ".broken").write_bytes(raw)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(line + b"\n" for line in good))
    os.replace(tmp, path)
    return dropped


def count_records(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(1 for line in path.read_bytes().splitlines() if line.strip())
