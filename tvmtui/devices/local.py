"""The local CPU (and GPUs) as TVM target dicts (never `mcpu=native`: LLVM 22 rejects it)."""

from __future__ import annotations

import os


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _facts_key() -> str | None:
    """What LLVM's answers about this host depend on: the TVM build (its libraries'
    sizes and times) and the CPU's identity; None when TVM cannot be found."""
    import hashlib
    import importlib.util
    import json
    import platform
    from pathlib import Path

    from tvmtui.devices.fingerprint import parse_cpuinfo

    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.origin:
        return None
    libs = sorted(Path(spec.origin).parent.glob("lib*.so"))
    stamps = [(lib.name, lib.stat().st_size, int(lib.stat().st_mtime)) for lib in libs]
    try:
        cpuinfo = parse_cpuinfo(Path("/proc/cpuinfo").read_text(), platform.machine())
    except OSError:
        cpuinfo = {}
    text = json.dumps([spec.origin, stamps, platform.machine(), cpuinfo], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _ask_llvm() -> dict:
    """TVM's LLVM on this host: major version, system triple and CPU name, and which of
    the x86 features tvmtui checks that CPU name implies."""
    import tvm
    from tvm.target import codegen

    from tvmtui.devices.fingerprint import X86_ISA

    triple, cpu = str(codegen.llvm_get_system_triple()), str(codegen.llvm_get_system_cpu())
    implied = {}
    if triple.startswith(("x86_64", "i686")):
        target = tvm.target.Target({"kind": "llvm", "mtriple": triple, "mcpu": cpu})
        implied = {f: bool(codegen.llvm_cpu_has_features([f], target)) for f in X86_ISA.values()}
    return {"llvm": str(codegen.llvm_version_major()), "triple": triple, "cpu": cpu,
            "implied": implied}


def llvm_facts() -> dict:
    """`_ask_llvm()`, kept in the cache folder per TVM build and CPU: asking imports TVM,
    1.5 s of every `tune` before its worker could start."""
    import json

    from tvmtui.workloads.nets import cache_dir

    key = _facts_key()
    path = cache_dir().parent / "llvm-host.json"
    if key:
        try:
            cached = json.loads(path.read_text())
            if cached.get("key") == key:
                return cached["facts"]
        except (OSError, ValueError, KeyError):
            pass
    facts = _ask_llvm()
    if key:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps({"key": key, "facts": facts}))
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only cache: ask again next time
    return facts


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

    from tvmtui.devices.fingerprint import local_fingerprint

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
