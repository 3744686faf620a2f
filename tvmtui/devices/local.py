"""The local CPU (and GPUs) as TVM target dicts (never `mcpu=native`: LLVM 22 rejects it)."""

from __future__ import annotations

import os


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _mattr(facts: dict, isa: list[str], arch: str) -> list[str]:
    """Feature switches beyond what `mcpu` implies. On ARM every present extension is
    listed (LLVM often names an unknown core `generic`); on x86 only where the kernel's view
    differs from the CPU name's (a hypervisor that hides AVX-512 must not get AVX-512)."""
    from tvmtui.devices.fingerprint import ARM_ISA, X86_ISA

    if arch in ("aarch64", "arm64"):
        return [f"+{f}" for f in ARM_ISA.values() if f in isa]
    out = []
    for feature in X86_ISA.values():
        implied = bool(facts["implied"].get(feature))
        present = feature in isa
        if implied != present:
            out.append(("+" if present else "-") + feature)
    return out


def local_cpu_target(num_cores: int | None = None) -> dict:
    """LLVM's own name for this host's CPU and triple, ISA fix-ups, and the cores we use."""
    import platform

    from tvmtui.devices.fingerprint import llvm_facts, local_fingerprint

    facts = llvm_facts()
    target = {
        "kind": "llvm",
        "mtriple": facts["triple"],
        "mcpu": facts["cpu"],
        "num-cores": int(num_cores or cpu_count()),
    }
    mattr = _mattr(facts, local_fingerprint().isa, platform.machine())
    if mattr:
        target["mattr"] = mattr
    return target


def local_gpus() -> list[dict]:
    """`{"name", "compute", "target"}` for each CUDA device TVM can see."""
    import tvm

    found = []
    for index in range(8):
        dev = tvm.cuda(index)
        if not dev.exist:
            break
        compute = str(dev.compute_version)
        arch = "sm_" + compute.replace(".", "")
        found.append({
            "name": str(dev.device_name),
            "compute": compute,
            "index": index,
            "target": {
                "kind": "cuda",
                "arch": arch,
                "max_threads_per_block": int(dev.max_threads_per_block),
                "max_shared_memory_per_block": int(dev.max_shared_memory_per_block),
                "thread_warp_size": int(dev.warp_size),
                "host": local_cpu_target(),
            },
        })
    return found


def describe_target(target: dict) -> str:
    """A short label: `znver3 x2` for an LLVM CPU target, `cuda sm_86` for others."""
    kind = target.get("kind", "?")
    cpu = target.get("mcpu") or target.get("arch") or ""
    cores = target.get("num-cores")
    parts = [] if kind == "llvm" and cpu else [kind]
    if kind == "llvm" and "aarch64" in str(target.get("mtriple", "")) and cpu in ("", "generic"):
        parts = ["aarch64"]
        cpu = ""
    parts += [cpu, f"x{cores}" if cores else ""]
    return " ".join(str(p) for p in parts if p)
