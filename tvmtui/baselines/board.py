"""Baselines on the board a session was tuned on, through tvmtui's board server.

Host side: `Board` holds one RPC session to the board (a server serves one session at a
time) and `BoardRunner` is a runtime loaded there, with the interface of a local
`host.RemoteRunner`, so timing and parity run unchanged. TVM libraries are compiled on the
host for the board's target and uploaded.

Board side (inside `python -m tvmtui.board`): `tvmtui.bench.open` starts one
process per runtime (`python -m tvmtui.baselines.board`) that serves the same requests as a
local runtime process, over its stdin/stdout in `wire` format. Arm NN runs under the
system Python (`TVMTUI_ARMNN_PYTHON`, default /usr/bin/python3) with only tvmtui on its
path: Debian's pyarmnn needs Debian's numpy 1.x, which the board's TVM and LiteRT do not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tvmtui.baselines import wire
from tvmtui.baselines.host import RunnerSpec, RuntimeClient, RuntimeFailed
from tvmtui.baselines.model import BenchModel

OPEN, ASK, CLOSE = "tvmtui.bench.open", "tvmtui.bench.ask", "tvmtui.bench.close"


# ---- the spec, on the wire ------------------------------------------------------------------
def spec_message(spec: RunnerSpec, library: str | None) -> tuple:
    m = spec.model
    head = {"name": spec.name, "threads": spec.threads, "options": spec.options,
            "library": library, "detail": spec.detail,
            "model": {"name": m.name, "native": m.native, "input_shapes": m.input_shapes,
                      "input_dtypes": m.input_dtypes, "flops": m.flops,
                      "output_steps": list(m.output_steps), "formats": sorted(m.files)}}
    return (head, *(m.files[f] for f in sorted(m.files)))


def spec_from_message(msg: tuple) -> RunnerSpec:
    head, *files = msg
    mh = head["model"]
    model = BenchModel(mh["name"], mh["native"], mh["input_shapes"], mh["input_dtypes"],
                       dict(zip(mh["formats"], files)), mh["flops"], tuple(mh["output_steps"]))
    library = Path(head["library"]) if head["library"] else None
    return RunnerSpec(head["name"], model, head["threads"], head["options"], library,
                      head["detail"])


# ---- board side -----------------------------------------------------------------------------
def child_main() -> int:
    """One runtime on the board: read the spec, then serve requests (see `host._serve`)."""
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # runtimes print to stdout; only the protocol may use it
    sys.stdout = sys.stderr
    conn = wire.StreamConn(sys.stdin.buffer, proto)
    from tvmtui.baselines.host import _serve

    _serve(conn, spec_from_message(conn.recv()))
    return 0


class _Child:
    """A runtime process on the board (the board's RPC server runs one call at a time)."""

    def __init__(self, spec_bytes: bytes, name: str):
        env = dict(os.environ)
        python = sys.executable
        if name == "acl" and _armnn_elsewhere():
            python = os.environ.get("TVMTUI_ARMNN_PYTHON", "/usr/bin/python3")
            import tvmtui

            env["PYTHONPATH"] = str(Path(tvmtui.__file__).resolve().parents[1])
        self.proc = subprocess.Popen([python, "-m", "tvmtui.baselines.board"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.conn = wire.StreamConn(self.proc.stdout, self.proc.stdin)
        self.pending: bytes | None = spec_bytes  # sent with the first exchange

    def exchange(self, data: bytes | None) -> bytes:
        try:
            if self.pending is not None:
                spec, self.pending = self.pending, None
                self.conn.send_bytes(spec)
            if data is not None:
                self.conn.send_bytes(data)
            return self.conn.recv_bytes()
        except (EOFError, OSError):
            code = self.proc.wait()
            return wire.encode(("error", f"its process on the board died (exit code {code}; "
                                         "the board server's log has its error)"))

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def _armnn_elsewhere() -> bool:
    """On an Arm board whose own Python cannot import pyarmnn: the system Python may."""
    import platform
    from importlib.util import find_spec

    return platform.machine() in ("aarch64", "arm64", "armv7l") and find_spec("pyarmnn") is None


_children: dict[str, _Child] = {}


def board_open(name: str, spec_bytes: bytes) -> bytes:
    """Start runtime `name`; answers ("ready", detail) or ("unavailable", reason)."""
    board_close(name)
    child = _children[name] = _Child(bytes(spec_bytes), name)
    return child.exchange(None)


def board_ask(name: str, data: bytes) -> bytes:
    child = _children.get(name)
    if child is None:
        return wire.encode(("error", f"{name} is not loaded on the board"))
    return child.exchange(bytes(data))


def board_close(name: str) -> None:
    child = _children.pop(name, None)
    if child is not None:
        child.close()


def register_functions() -> None:
    import tvm_ffi

    for fname, func in ((OPEN, board_open), (ASK, board_ask), (CLOSE, board_close)):
        tvm_ffi.register_global_func(fname, func, override=True)


# ---- host side ------------------------------------------------------------------------------
class Board:
    """One RPC session to a board, shared by every runtime benched there. After a call
    fails at the transport level the board counts as lost and every later call fails."""

    def __init__(self, device: dict, session_timeout: float = 7200):
        from tvmtui.devices.rpc import Device, board_info, connect_device

        self.sess, self.address, _ = connect_device(Device(**device),
                                                    session_timeout=session_timeout, wait=120)
        self.info = board_info(self.sess)
        self.label = f"board {self.address}"
        self.lost: str | None = None
        try:
            self._funcs = {f: self.sess.get_function(f) for f in (OPEN, ASK, CLOSE)}
        except Exception:  # noqa: BLE001 - a plain TVM server has none of tvmtui's functions
            self._funcs = {}

    @property
    def serves_baselines(self) -> bool:
        return bool(self._funcs)

    @property
    def emulated(self) -> str | None:
        return self.info.get("emulated")

    def _call(self, func, *args):
        if self.lost:
            raise RuntimeFailed(self.lost)
        try:
            return func(*args)
        except Exception as exc:  # noqa: BLE001 - TVM raises its own types for a dead link
            text = str(exc).strip()
            why = text.splitlines()[-1][:200] if text else type(exc).__name__
            self.lost = f"the board at {self.address} dropped mid-bench ({why})"
            raise RuntimeFailed(self.lost) from None

    def request(self, func: str, name: str, msg: tuple | None = None) -> tuple:
        """Send `msg` to the board's `func` for runtime `name`; its decoded answer."""
        answer = self._call(self._funcs[func], name, *(() if msg is None else (wire.encode(msg),)))
        return wire.decode(answer) if answer is not None else ()

    def upload(self, path: Path) -> str:
        """Copy a library to the board; its path there."""
        self._call(self.sess.upload, str(path), path.name)
        return str(self._call(self.sess.get_function("tvm.rpc.server.workpath"), path.name))


class BoardRunner(RuntimeClient):
    """A runtime loaded on the board (the interface of `host.RemoteRunner`)."""

    def __init__(self, board: Board, spec: RunnerSpec):
        self.board, self.spec = board, spec
        self.name, self.detail = spec.name, spec.detail

    def start(self, timeout: float = 600.0) -> str | None:
        if not self.board.serves_baselines:
            return ("the board's server does not serve baselines: run `python -m "
                    "tvmtui.board` there to bench them on it")
        library = self.board.upload(self.spec.library) if self.spec.library else None
        status, text = self.board.request(OPEN, self.name, spec_message(self.spec, library))
        if status != "ready":
            where = "not installed on the board" if "not installed" in text else "on the board"
            return f"{where}: {text}"
        self.detail = text
        return None

    def _ask(self, *msg):
        status, value = self.board.request(ASK, self.name, msg)
        if status != "ok":
            raise RuntimeFailed(value)
        return value

    def close(self) -> None:
        if not self.board.lost and self.board.serves_baselines:
            try:
                self.board.request(CLOSE, self.name)
            except RuntimeFailed:
                pass


if __name__ == "__main__":
    sys.exit(child_main())
