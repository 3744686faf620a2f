"""The board server: `python -m tvmtui.board --tracker HOST:9190 --key rpi4 [--host ADDRESS]`.

TVM's RPC server as `devices/server.py` runs it (tuning, the board's fingerprint), plus the
functions `tvmtui bench` drives on the board (`baselines/board.py`): it sits above both, so
neither reaches into the other. Flags as `python -m tvmtui.board --help` lists them.
"""

from __future__ import annotations

import sys


def register() -> None:
    """Everything the board serves; TVM runs it again in its serving process."""
    from tvmtui.baselines.board import register_functions
    from tvmtui.devices import server

    server.register()
    register_functions()


def main(argv: list[str] | None = None) -> int:
    from tvmtui.devices import server

    return server.main(argv, prog="python -m tvmtui.board", init=register)


if __name__ == "__main__":
    sys.exit(main())
