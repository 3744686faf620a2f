"""The docs still describe the tool: every `tvmtui ...` line in a fenced block of the README
and docs/ parses against the real command line, and the cheap ones run (listing, showing,
`--version`), in a fresh sessions folder, their --json parsed."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tvmtui.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# What runs for real: it reads, lists or describes, and takes seconds.
CHEAP = (("--version",), ("zoo", "list"), ("zoo", "show"), ("sessions", "list"),
         ("sessions", "show"), ("devices",))
SHELL = ("sh", "bash", "shell", "console")  # the blocks commands are in (not diagrams)
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]{2,}\b")  # NAME, HOST, TRACKER_HOST: not runnable


def documented_commands() -> list[tuple[str, str]]:
    """(page, line) for every `tvmtui ...` command in a fenced shell block."""
    found = []
    for page in PAGES:
        fence: str | None = None  # the open block's language
        for line in page.read_text().splitlines():
            if line.startswith("```"):
                fence = None if fence is not None else line[3:].strip()
                continue
            if fence not in SHELL:
                continue
            for part in line.split("&&"):  # `pip install -e . && tvmtui tune ...`
                command = part.split("#")[0].strip()
                if command.startswith("tvmtui ") or command == "tvmtui":
                    found.append((page.name, command.rstrip("\\").strip()))
    return found


COMMANDS = documented_commands()


def test_the_pages_show_commands():
    pages = {page for page, _ in COMMANDS}
    assert {"README.md", "guide.md", "boards.md", "models.md"} <= pages, pages
    assert len(COMMANDS) >= 20


@pytest.mark.parametrize("page,line", COMMANDS, ids=[f"{p}:{c}" for p, c in COMMANDS])
def test_documented_command_parses(page, line):
    args = shlex.split(line)[1:]
    try:
        build_parser().parse_args(args)
    except SystemExit as exc:
        pytest.fail(f"{page}: `{line}` no longer parses (exit {exc.code})")


RUNNABLE = [(p, c) for p, c in COMMANDS
            if any(shlex.split(c)[1:1 + len(k)] == list(k) for k in CHEAP)
            and not PLACEHOLDER.search(c) and "--tracker" not in c]


def test_some_documented_commands_are_cheap_enough_to_run():
    assert len(RUNNABLE) >= 5, RUNNABLE


@pytest.mark.parametrize("page,line", RUNNABLE, ids=[f"{p}:{c}" for p, c in RUNNABLE])
def test_cheap_documented_command_runs(page, line, tmp_path):
    env = dict(os.environ, TVMTUI_SESSIONS=str(tmp_path / "sessions"))
    out = subprocess.run([sys.executable, "-m", "tvmtui", *shlex.split(line)[1:]], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{page}: `{line}` exited {out.returncode}: {out.stderr[-800:]}"
    assert out.stdout.strip(), f"{page}: `{line}` printed nothing"
    if "--json" in line:
        json.loads(out.stdout)
