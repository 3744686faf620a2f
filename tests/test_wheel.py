"""A non-editable install works: the wheel carries the stylesheet and the demo session."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

APP_CHECK = textwrap.dedent("""
    import asyncio, sys, tvmtui
    from pathlib import Path
    from tvmtui.tui.app import TvmTuiApp
    from tvmtui.tui.screens import LiveScreen
    assert "site-packages" in tvmtui.__file__ and "{root}" not in tvmtui.__file__, tvmtui.__file__
    assert (Path(tvmtui.__file__).parent / "tui" / "web" / "app_index.html").is_file()  # --web's page

    async def main():
        app = TvmTuiApp(Path(sys.argv[1]), start="replay", session="demo", speed=200)
        async with app.run_test(size=(100, 30)) as pilot:
            for _ in range(80):
                await pilot.pause(0.1)
                if isinstance(app.screen, LiveScreen) and app.screen.view.trials > 0:
                    break
            assert isinstance(app.screen, LiveScreen), app.screen
            assert app.screen.view.trials > 0
            assert any("task-table" in str(rule) for rule in app.stylesheet.rules)
    asyncio.run(main())
    print("replayed", flush=True)
""")


def test_wheel_installs_into_a_fresh_venv_with_stylesheet_and_demo(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                    "-q", "-w", str(wheels)], check=True, timeout=600)
    (wheel,) = wheels.glob("tvmtui-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py, exe = venv / "bin" / "python", venv / "bin" / "tvmtui"
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], check=True,
                   timeout=300)
    # The dependencies (TVM, Textual, ...) come from this interpreter's site-packages, put
    # on PYTHONPATH (no .pth files run from there: the editable install stays out).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(site.getsitepackages()))
    env.pop("TVMTUI_SESSIONS", None)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    shown = subprocess.run([str(exe), "--version"], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == f"tvmtui {wheel.name.split('-')[1]}"  # the wheel's own
    listed = subprocess.run([str(exe), "zoo", "list", "--json"], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    assert "resnet18" in {row["name"] for row in json.loads(listed.stdout)}
    demo = subprocess.run([str(exe), "sessions", "show", "demo", "--json"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stderr
    assert json.loads(demo.stdout)["trials"] > 0
    replay = subprocess.run([str(py), "-c", APP_CHECK.replace("{root}", str(ROOT)),
                             str(cwd / "sessions")], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=300)
    assert replay.returncode == 0 and "replayed" in replay.stdout, replay.stderr[-2000:]
