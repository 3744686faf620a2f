"""Boards through TVM's RPC tracker: device URLs, tracker queues, sessions, board facts.

`tracker://HOST:PORT/KEY` measures on any free server registered under KEY (several
servers under one key form a farm: the tracker spreads the requests); `rpc://HOST:PORT`
is a single server. MetaSchedule's `RPCRunner` does the measuring; the functions here are
its session, upload and cleanup hooks, which tell a wait in the tracker queue apart from a
failure on the board and log which server measured which candidate.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from urllib.parse import urlparse

from tvmtui.core.errors import UserError
from tvmtui.core.events import DEVICE_LOST, QUEUE_TIMEOUT

HEALTH_LOG_ENV = "TVMTUI_DEVICE_LOG"
QUEUE_TIMEOUT_ENV = "TVMTUI_QUEUE_TIMEOUT"
RUN_TIMEOUT_ENV = "TVMTUI_RUN_TIMEOUT"


@dataclass(frozen=True)
class Device:
    kind: str  # "local", "cuda" (key: GPU index), "tracker" or "rpc"
    host: str = ""
    port: int = 0
    key: str = ""

    @property
    def remote(self) -> bool:
        """Measured through RPC (a board), not by a runner on this machine."""
        return self.kind in ("tracker", "rpc")

    def url(self) -> str:
        if self.kind == "tracker":
            return f"tracker://{self.host}:{self.port}/{self.key}"
        if self.kind == "rpc":
            return f"rpc://{self.host}:{self.port}"
        if self.kind == "cuda":
            return f"cuda:{self.key or 0}"
        return "local"

    def to_json(self) -> dict:
        return asdict(self)


def parse_device(text: str | None) -> Device:
    """`local` (default), `cuda[:N]`, `tracker://HOST:PORT/KEY` or `rpc://HOST:PORT`."""
    if not text or text in ("local", "cpu", "local-cpu"):
        return Device("local")
    gpu = text.partition(":")
    if gpu[0] in ("cuda", "gpu") and (not gpu[2] or gpu[2].isdigit()):
        return Device("cuda", key=gpu[2] or "0")
    url = urlparse(text)
    try:
        port = url.port
    except ValueError:
        port = None
    if url.scheme == "tracker" and url.hostname and port and url.path.strip("/"):
        return Device("tracker", url.hostname, port, url.path.strip("/"))
    if url.scheme == "rpc" and url.hostname and port:
        return Device("rpc", url.hostname, port)
    raise UserError(
        f"bad --device {text!r}: use local, cuda:N, tracker://HOST:PORT/KEY or rpc://HOST:PORT"
    )


def parse_hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"bad tracker address {text!r}: use HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


def _probe(host: str, port: int, what: str, timeout: float = 3.0) -> None:
    """Fail fast, in one line, when nothing listens (TVM's clients retry for a minute)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"cannot reach the {what} at {host}:{port} ({reason}); is it running "
                        "and is the address right?") from None


# ---- the tracker -----------------------------------------------------------------------
def tracker_keys(host: str, port: int) -> dict[str, dict]:
    """Per key: `total` servers, `free`, `pending` requests and the servers' addresses,
    as `python -m tvm.exec.query_rpc_tracker` shows them."""
    from tvm import rpc

    _probe(host, port, "RPC tracker")
    try:
        summary = rpc.connect_tracker(host, port).summary()
    except (OSError, RuntimeError, ValueError) as exc:
        raise UserError(f"{host}:{port} does not answer as a TVM RPC tracker ({exc})") from None
    keys: dict[str, dict] = {}
    for item in summary.get("server_info", []):
        key = item["key"].split(":", 1)[-1]
        entry = keys.setdefault(key, {"total": 0, "free": 0, "pending": 0, "servers": []})
        entry["total"] += 1
        entry["servers"].append(f"{item['addr'][0]}:{item['addr'][1]}")
    for key, queue in summary.get("queue_info", {}).items():
        entry = keys.setdefault(key, {"total": 0, "free": 0, "pending": 0, "servers": []})
        entry["free"] = int(queue.get("free", 0))
        entry["pending"] = int(queue.get("pending", 0))
    return keys


def check_device(device: Device) -> int:
    """Servers that can measure for `device` (fails in one line when there are none)."""
    if device.kind == "rpc":
        _probe(device.host, device.port, "RPC server")
        return 1
    keys = tracker_keys(device.host, device.port)
    entry = keys.get(device.key)
    if not entry or entry["total"] == 0:
        known = ", ".join(sorted(k for k, v in keys.items() if v["total"])) or "none"
        raise UserError(
            f"no server is registered under key {device.key!r} at tracker "
            f"{device.host}:{device.port} (keys there: {known}); check the key the board's "
            "RPC server was started with"
        )
    return entry["total"]


QUEUE_CHECK_S = 5.0  # how often a queued request checks that its key still has servers


def _request(host: str, port: int, key: str, session_timeout: float, wait: float):
    """A session on a free server of `key`, waiting at most `wait` seconds in the queue.
    Returns (session, "host:port" of the server, seconds spent waiting)."""
    from tvm import rpc
    from tvm.rpc import base

    start = time.time()
    box: dict = {}

    def ask() -> None:
        try:
            _probe(host, port, "RPC tracker")  # gone: fail now, not after a minute of retries
            tracker = rpc.connect_tracker(host, port)
            base.sendjson(tracker._sock, [base.TrackerCode.REQUEST, key, "", 1])
            value = base.recvjson(tracker._sock)
            if value[0] != base.TrackerCode.SUCCESS:
                raise RuntimeError(f"tracker refused the request: {value}")
            url, sport, matchkey = value[1]
            sess = rpc.connect(url, sport, matchkey, session_timeout)
            if box.get("abandoned"):
                del sess
                return
            box["result"] = (sess, f"{url}:{sport}")
        except Exception as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(min(wait, 0.5))  # a free server answers well within this
    while thread.is_alive() and time.time() - start < wait:
        # Still queued: give up at once when no server is left under the key (the tracker
        # would hold the request for the whole wait), else wait on.
        try:
            gone = not tracker_keys(host, port).get(key, {}).get("total")
        except UserError as exc:
            box["error"], gone = exc, True
        if gone:
            box["abandoned"] = True
            box.setdefault("error", f"no server is registered under key {key!r} at the tracker "
                                    f"{host}:{port} any more")
            break
        thread.join(min(QUEUE_CHECK_S, max(0.0, wait - (time.time() - start))))
    if thread.is_alive() and "error" not in box:
        box["abandoned"] = True
        raise RuntimeError(
            f"{QUEUE_TIMEOUT}: waited {wait:.0f} s in the tracker queue for a free '{key}' server"
        )
    if "error" in box:
        raise RuntimeError(f"{DEVICE_LOST}: {box['error']}")
    sess, addr = box["result"]
    return sess, addr, time.time() - start


def connect_device(device: Device, session_timeout: float = 60, wait: float = 60):
    """(RPC session, server address, queue seconds) for a board."""
    from tvm import rpc

    if device.kind == "rpc":
        _probe(device.host, device.port, "RPC server")
        return rpc.connect(device.host, device.port, session_timeout=session_timeout), \
            f"{device.host}:{device.port}", 0.0
    check_device(device)
    return _request(device.host, device.port, device.key, session_timeout, wait)


def board_info(sess) -> dict:
    """The board's own `tvmtui` facts (fingerprint, TVM version, target) when its server is
    `python -m tvmtui.board` (or `tvmtui.devices.server`); else what a plain TVM server lets us read."""
    try:
        return json.loads(sess.get_function("tvmtui.device_info")())
    except Exception:  # noqa: BLE001 - a plain `tvm.exec.rpc_server` has no such function
        pass
    from tvmtui.devices.fingerprint import Fingerprint, parse_cpuinfo

    try:
        cpuinfo = bytes(sess.download("/proc/cpuinfo")).decode(errors="replace")
    except Exception:  # noqa: BLE001 - the server may refuse paths outside its folder
        cpuinfo = ""
    arch = "aarch64" if "CPU implementer" in cpuinfo else "unknown"
    fp = Fingerprint(arch=arch, cores=cpuinfo.count("processor\t:") or 1, kernel="?",
                     **parse_cpuinfo(cpuinfo, arch))
    return {"fingerprint": fp.to_json(), "tvm": None, "target": None, "plain_server": True}


# ---- MetaSchedule RPCRunner hooks (run in the runner's pool processes) ----------------------
_job: dict = {}


def _health(record: dict) -> None:
    path = os.environ.get(HEALTH_LOG_ENV)
    if not path:
        return
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def runner_create_session(rpc_config):
    """Tracker request with a queue deadline; remembers which server answered."""
    from tvm import rpc

    wait = float(os.environ.get(QUEUE_TIMEOUT_ENV, "60"))
    run_timeout = float(os.environ.get(RUN_TIMEOUT_ENV, "30"))
    _job.clear()
    _job["t0"] = time.time()
    host, port, key = rpc_config.tracker_host, rpc_config.tracker_port, rpc_config.tracker_key
    try:
        if key.startswith("rpc://"):
            device = parse_device(key)
            sess = rpc.connect(device.host, device.port, session_timeout=run_timeout)
            addr, waited = f"{device.host}:{device.port}", 0.0
        else:
            sess, addr, waited = _request(host, port, key, run_timeout, wait)
    except Exception as exc:
        text = str(exc)
        kind = QUEUE_TIMEOUT if QUEUE_TIMEOUT in text else DEVICE_LOST
        _health({"t": time.time(), "server": None, "ok": False, "kind": kind, "error": text[:300]})
        raise
    _job.update(server=addr, queue_s=waited)
    return sess


def runner_upload_module(session, local_path: str, remote_path: str):
    from tvm.s_tir.meta_schedule.runner.rpc_runner import default_upload_module

    _job["artifact"] = local_path
    return default_upload_module(session, local_path, remote_path)


def runner_cleanup(session, remote_path) -> None:
    from tvm.s_tir.meta_schedule.runner.rpc_runner import default_cleanup

    ok = True
    try:
        default_cleanup(session, remote_path)
    except Exception:  # noqa: BLE001 - a board gone before cleanup is reported as lost
        ok = False
    if _job.get("server"):
        _health({"t": time.time(), "server": _job["server"], "artifact": _job.get("artifact"),
                 "queue_s": round(_job.get("queue_s", 0.0), 3), "ok": ok,
                 "seconds": round(time.time() - _job["t0"], 3)})
    _job.clear()
