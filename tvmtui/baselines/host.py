"""Each runtime in a process of its own: runtimes' thread pools never share a process.

Put in one process, they fight: TVM binds its pool's threads to cores and every runtime's
workers spin after a call, so whichever ran last slows the next (seen here: ONNX Runtime
1.7x slower once a TVM module had run in the same process). A `RemoteRunner` starts a fresh
interpreter (`spawn`), loads one runtime there with its own thread count, and answers
`infer`, `warm` and `time` requests over a pipe.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tvmtui.baselines.model import BenchModel


@dataclass(frozen=True)
class RunnerSpec:
    name: str
    model: BenchModel
    threads: int
    options: dict
    library: Path | None = None  # for the TVM runners
    detail: str = ""


def _load(spec: RunnerSpec):
    from tvmtui.baselines import runners as rn

    if spec.library is not None:
        return rn.tvm_runner(spec.name, spec.library, spec.model, spec.detail)
    return rn.LOADERS[spec.name](spec.model, spec.threads, spec.options)


def _serve(conn, spec: RunnerSpec) -> None:
    """The child's loop: load, then answer until told to quit or the pipe closes."""
    os.environ["TVM_NUM_THREADS"] = str(spec.threads)
    from tvmtui.baselines import runners as rn

    try:
        runner = _load(spec)
    except rn.Unavailable as exc:
        conn.send(("unavailable", str(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - reported to the parent as this baseline's failure
        conn.send(("unavailable", f"failed to load: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", runner.detail))
    prepared = None
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        op = msg[0]
        try:
            if op == "infer":
                conn.send(("ok", runner.infer(msg[1])))
            elif op == "prepare":
                prepared = runner.feed(msg[1])
                conn.send(("ok", None))
            elif op == "warm":
                times: list[float] = []
                start = time.perf_counter()
                while len(times) < max(2, msg[1]):
                    t0 = time.perf_counter()
                    runner.invoke(prepared)
                    times.append(time.perf_counter() - t0)
                    if len(times) >= 2 and time.perf_counter() - start > 2.0:
                        break
                conn.send(("ok", float(np.median(times[-3:]))))
            elif op == "time":
                import gc

                gc.disable()
                # Untimed runs first (at least 3 and 50 ms): after the rest between blocks
                # the runtime's threads, and on a VM the idle virtual CPU, need waking.
                start = time.perf_counter()
                for i in range(1000):
                    runner.invoke(prepared)
                    if i >= 2 and time.perf_counter() - start > 0.05:
                        break
                out = []
                for _ in range(msg[1]):
                    t0 = time.perf_counter()
                    runner.invoke(prepared)
                    out.append(time.perf_counter() - t0)
                gc.enable()
                conn.send(("ok", out))
            elif op == "quit":
                return
        except Exception as exc:  # noqa: BLE001 - the parent records it against this runtime
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class RuntimeFailed(Exception):
    pass


class RuntimeClient:
    """The requests a loaded runtime answers (`_serve`), over whatever `_ask` reaches it by."""

    name: str

    def _ask(self, *msg):
        raise NotImplementedError

    def infer(self, frame: list[np.ndarray]) -> list[np.ndarray]:
        return self._ask("infer", frame)

    def prepare(self, frame: list[np.ndarray]) -> None:
        self._ask("prepare", frame)

    def warm(self, runs: int) -> float:
        return self._ask("warm", runs)

    def time(self, runs: int) -> list[float]:
        return self._ask("time", runs)


class RemoteRunner(RuntimeClient):
    """A runtime loaded in its own process. `start` returns None or the reason it can't run."""

    def __init__(self, spec: RunnerSpec):
        self.spec = spec
        self.name = spec.name
        self.detail = spec.detail
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, spec), daemon=True)

    def start(self, timeout: float = 600.0) -> str | None:
        self._proc.start()
        if not self._conn.poll(timeout):
            self.close()
            return f"did not load within {timeout:.0f} s"
        try:
            status, text = self._conn.recv()
        except EOFError:
            return f"its process died while loading (exit code {self._proc.exitcode})"
        if status != "ready":
            self.close()
            return text
        self.detail = text
        return None

    def _ask(self, *msg):
        try:
            self._conn.send(msg)
            status, value = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise RuntimeFailed(
                f"{self.name}'s process died (exit code {self._proc.exitcode})") from None
        if status != "ok":
            raise RuntimeFailed(value)
        return value

    def close(self) -> None:
        if self._proc.is_alive():
            try:
                self._conn.send(("quit",))
            except (BrokenPipeError, OSError):
                pass
            self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
        self._conn.close()
