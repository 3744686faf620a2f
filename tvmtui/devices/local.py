"""The local CPU as a TVM target dict (never `mcpu=native`: LLVM 22 rejects it)."""

from __future__ import annotations

import os


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def local_cpu_target(num_cores: int | None = None) -> dict:
    """LLVM's own name for this host's CPU and triple, and the cores we may use."""
    from tvm.target import codegen

    target = {
        "kind": "llvm",
        "mtriple": str(codegen.llvm_get_system_triple()),
        "mcpu": str(codegen.llvm_get_system_cpu()),
        "num-cores": int(num_cores or cpu_count()),
    }
    return target


def describe_target(target: dict) -> str:
    """A short label: `znver3 x2` for an LLVM CPU target, `cuda sm_86` for others."""
    kind = target.get("kind", "?")
    cpu = target.get("mcpu") or target.get("arch") or ""
    cores = target.get("num-cores")
    parts = [] if kind == "llvm" and cpu else [kind]
    parts += [cpu, f"x{cores}" if cores else ""]
    return " ".join(str(p) for p in parts if p)

