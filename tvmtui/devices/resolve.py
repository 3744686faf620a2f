"""Turn `--device` into what a session stores: the device, its target and its fingerprint."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tvmtui.core.errors import UserError
from tvmtui.devices.rpc import Device, board_info, check_device, connect_device, parse_device


@dataclass
class Resolved:
    device: Device
    target: dict
    fingerprint: dict
    servers: int  # how many servers can measure (1 for the local CPU)


def resolve_device(url: str | None, cores: int | None = None,
                   override: dict | None = None) -> Resolved:
    """The local CPU, or a board reached through a tracker / server (asked for its facts)."""
    device = parse_device(url)
    if device.kind == "local":
        from tvmtui.devices.fingerprint import this_fingerprint
        from tvmtui.devices.local import local_cpu_target

        return Resolved(device, override or local_cpu_target(cores),
                        this_fingerprint().to_json(), 1)
    if device.kind == "cuda":
        return _local_gpu(device, override)
    servers = check_device(device)
    try:
        sess, addr, _ = connect_device(device, session_timeout=60, wait=60)
    except RuntimeError as exc:
        raise UserError(f"could not open a session on {device.url()}: {exc}") from None
    info = board_info(sess)
    from tvmtui.devices.fingerprint import versions

    _, host_tvm = versions()
    if info.get("tvm") and info["tvm"] != host_tvm:
        raise UserError(
            f"the board at {addr} runs TVM {info['tvm']}, this host {host_tvm}: install "
            f"apache-tvm=={host_tvm} on the board (RPC modules must match)"
        )
    target = override or info.get("target")
    if not target or "error" in target:
        raise UserError(
            f"the board at {addr} cannot describe its target (a plain TVM RPC server?): start "
            "it with `python -m tvmtui.board`, or pass --target '{\"kind\": \"llvm\", "
            "\"mtriple\": \"aarch64-linux-gnu\", ...}'"
        )
    if cores:
        target = dict(target, **{"num-cores": cores})
    return Resolved(device, target, info["fingerprint"], servers)


def _local_gpu(device: Device, override: dict | None) -> Resolved:
    """A CUDA GPU of this machine: its `cuda` target; the chip fingerprint plus the GPU's
    name and compute capability. (No GPU on the development machine: untested there.)"""
    from tvmtui.devices.fingerprint import Fingerprint, this_fingerprint
    from tvmtui.devices.local import local_gpus

    gpus = local_gpus()
    chosen = next((g for g in gpus if str(g["index"]) == device.key), None)
    if chosen is None:
        raise UserError(
            f"no CUDA GPU {device.key} here (TVM sees {len(gpus)}): check nvidia-smi and that "
            "this apache-tvm build has CUDA enabled"
        )
    data = dict(this_fingerprint().to_json(), id="",
                gpu={"name": chosen["name"], "compute": chosen["compute"]})
    return Resolved(device, override or chosen["target"], Fingerprint.from_json(data).to_json(), 1)


def parse_target(text: str) -> dict:
    """`--target`: a TVM target as a JSON object."""
    try:
        target = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"--target is not JSON ({exc.msg}); give a TVM target dict") from None
    if not isinstance(target, dict) or "kind" not in target:
        raise UserError("--target must be a JSON object with at least \"kind\"")
    import tvm

    try:
        tvm.target.Target(target)
    except Exception as exc:  # noqa: BLE001 - TVM says what is wrong with the dict
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"--target is not a target TVM knows: {first[:200]}") from None
    return target
