"""A real TVM RPC tracker and servers on 127.0.0.1, each in its own process group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


class Farm:
    """`start()` a tracker; `add_server(key)` registers a `tvmtui.board` under it."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []
        self.servers: dict[int, tuple[subprocess.Popen, str]] = {}
        self.tracker_port = 0

    def _spawn(self, args: list[str], log_name: str, env: dict | None = None) -> subprocess.Popen:
        log = open(self.log_dir / log_name, "ab")
        proc = subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
        self.procs.append(proc)
        return proc

    def start(self, port: int = 0) -> Farm:
        """Start the tracker (again on `port`, after `kill_tracker`)."""
        self.tracker_port = port or free_port()
        self.tracker_proc = self._spawn(
            ["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(self.tracker_port),
             "--port-end", str(self.tracker_port + 1)], "tracker.log")
        _wait_port(self.tracker_port)
        return self

    def kill_tracker(self) -> None:
        """SIGKILL the tracker (its machine goes away); the servers stay up."""
        os.killpg(self.tracker_proc.pid, signal.SIGKILL)
        self.tracker_proc.wait()

    @property
    def tracker(self) -> str:
        return f"127.0.0.1:{self.tracker_port}"

    def add_server(self, key: str, env_extra: dict | None = None) -> int:
        port = free_port()
        env = dict(os.environ, **(env_extra or {}))
        proc = self._spawn(["tvmtui.board", "--host", "127.0.0.1", "--port", str(port),
                            "--port-end", str(port + 1), "--tracker", self.tracker, "--key", key],
                           f"server-{port}.log", env)
        self.servers[port] = (proc, key)
        _wait_port(port)
        self.wait_registered(key, sum(1 for _, k in self.servers.values() if k == key))
        return port

    def wait_registered(self, key: str, at_least: int, timeout: float = 30.0) -> None:
        from tvmtui.devices.rpc import tracker_keys

        deadline = time.time() + timeout
        while time.time() < deadline:
            if tracker_keys("127.0.0.1", self.tracker_port).get(key, {}).get("total", 0) >= at_least:
                return
            time.sleep(0.2)
        raise AssertionError(f"{at_least} server(s) did not register under {key!r}")

    def server_log(self, port: int) -> str:
        return (self.log_dir / f"server-{port}.log").read_text(errors="replace")

    def kill_server(self, port: int) -> None:
        """SIGKILL the server and every process it started (as a board losing power)."""
        proc, _ = self.servers.pop(port)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def standalone_server(log_dir) -> tuple[subprocess.Popen, int]:
    """One `tvmtui.board` with no tracker (an `rpc://HOST:PORT` device)."""
    port = free_port()
    log = open(log_dir / f"standalone-{port}.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "tvmtui.board", "--host", "127.0.0.1",
                             "--port", str(port), "--port-end", str(port + 1)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    _wait_port(port)
    return proc, port
