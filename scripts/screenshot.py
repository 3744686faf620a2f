"""Draw `assets/screenshot.svg`, the README's picture: the live screen replaying the bundled
demo session to its end, as the app itself renders it (Textual's `save_screenshot`).

    python scripts/screenshot.py [--tab tasks|trials|charts|baselines] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


async def draw(out: Path, tab: str, size: tuple[int, int]) -> None:
    from tvmtui.tui.app import TvmTuiApp
    from tvmtui.tui.screens import LiveScreen

    with tempfile.TemporaryDirectory() as sessions:
        app = TvmTuiApp(Path(sessions), start="replay", session="demo", speed=1000)
        async with app.run_test(size=size) as pilot:
            for _ in range(600):
                await pilot.pause(0.1)
                screen = app.screen
                if isinstance(screen, LiveScreen) and screen.view.state in ("finished", "stopped"):
                    break
            else:
                raise SystemExit("the demo replay did not reach its end in 60 s")
            screen.action_tab(tab)
            await pilot.pause(1.0)
            app.save_screenshot(out.name, str(out.parent))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tab", default="trials")
    ap.add_argument("--out", default=str(ROOT / "assets" / "screenshot.svg"))
    ap.add_argument("--size", default="110x32", help="columns x rows")
    args = ap.parse_args()
    cols, rows = (int(v) for v in args.size.split("x"))
    asyncio.run(draw(Path(args.out), args.tab, (cols, rows)))
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
