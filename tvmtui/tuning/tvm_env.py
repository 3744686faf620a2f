"""Importing TVM the fast way, and the versions a session records."""

from __future__ import annotations

import sys
import types

# tensor_intrin submodules an LLVM CPU target never tensorizes with. Importing them costs
# ~25 s (cuda alone), and MetaSchedule's TuneContext imports the whole package.
_GPU_ONLY_INTRINSICS = ("cuda", "rocm", "hexagon", "metal")


def import_tvm(target: dict):
    """Import TVM and the tensor intrinsics `target` can use; return the tvm module."""
    if target.get("kind") == "llvm":
        for sub in _GPU_ONLY_INTRINSICS:
            full = f"tvm.s_tir.tensor_intrin.{sub}"
            if full not in sys.modules:
                sys.modules[full] = types.ModuleType(full)
    import tvm
    import tvm.s_tir.tensor_intrin  # noqa: F401  (registers the CPU intrinsics)

    return tvm


def versions() -> dict:
    """Versions of TVM and the packages a session depends on (no TVM import needed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for pkg in ("apache-tvm", "apache-tvm-ffi", "xgboost", "numpy", "onnx", "tvmtui"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out
