"""Importing TVM the fast way, and the versions a session records."""

from __future__ import annotations

import sys
import types

# tensor_intrin submodules, of which a target needs at most its own family's. Importing
# them costs ~25 s (cuda alone), arm_cpu ~1 s, and MetaSchedule's TuneContext imports the
# whole package: the others are stubbed before it is first imported.
_FAMILIES = ("cuda", "rocm", "hexagon", "metal", "x86", "arm_cpu", "riscv_cpu")
_stubbed: set[str] = set()


def _needed(target: dict) -> set[str]:
    """The tensor_intrin submodules `target` can tensorize with."""
    if target.get("kind") != "llvm":
        return set(_FAMILIES)
    import platform

    triple = str(target.get("mtriple") or platform.machine()).lower()
    if triple.startswith(("aarch64", "arm")):
        return {"arm_cpu"}
    if triple.startswith("riscv"):
        return {"riscv_cpu"}
    return {"x86"}


def import_tvm(target: dict):
    """Import TVM and the tensor intrinsics `target` can use; return the tvm module. A
    later call for another target imports the families it needs then."""
    import importlib

    needed = _needed(target)
    if "tvm.s_tir.tensor_intrin" not in sys.modules:
        for sub in set(_FAMILIES) - needed:
            full = f"tvm.s_tir.tensor_intrin.{sub}"
            if full not in sys.modules:
                sys.modules[full] = types.ModuleType(full)
                _stubbed.add(sub)
    import tvm
    import tvm.s_tir.tensor_intrin  # noqa: F401  (registers the CPU intrinsics)

    for sub in needed & _stubbed:
        _stubbed.discard(sub)
        del sys.modules[f"tvm.s_tir.tensor_intrin.{sub}"]
        importlib.import_module(f"tvm.s_tir.tensor_intrin.{sub}")
    from tvmtui.kernels import rules

    rules.register()
    return tvm


def versions() -> dict:
    """Versions of TVM and the packages a session depends on (no TVM import needed)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for pkg in ("apache-tvm", "apache-tvm-ffi", "xgboost", "numpy", "onnx", "tvmtui"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out
