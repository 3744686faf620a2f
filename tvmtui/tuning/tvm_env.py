"""Importing TVM the fast way, and the Relax steps shared by tuning and export."""

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


def model_to_relax(fmt: str, model_bytes: bytes, input_shapes: dict[str, list[int]]):
    """A session's model (ONNX or TFLite bytes) -> Relax IRModule in inference form."""
    if fmt == "tflite":
        return tflite_to_relax(model_bytes, input_shapes)
    return onnx_to_relax(model_bytes, input_shapes)


def tflite_to_relax(model_bytes: bytes, input_shapes: dict[str, list[int]]):
    """TFLite bytes -> Relax, with the layout fix TRANSPOSE_CONV needs to build."""
    import tflite
    import tvm
    from tvm import relax
    from tvm.relax.frontend.tflite import from_tflite

    model = tflite.Model.GetRootAsModel(model_bytes, 0)
    mod = from_tflite(model, shape_dict={k: tuple(v) for k, v in input_shapes.items()})
    return tvm.transform.Sequential(
        [
            relax.transform.ConvertLayout({"relax.nn.conv2d_transpose": ["NCHW", "IOHW"]}),
            relax.transform.DecomposeOpsForInference(),
            relax.transform.CanonicalizeBindings(),
        ]
    )(mod)


def onnx_to_relax(model_bytes: bytes, input_shapes: dict[str, list[int]]):
    """ONNX bytes -> Relax IRModule with weights bound as constants, inference form."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load_from_string(model_bytes)
    mod = from_onnx(model, shape_dict=input_shapes, keep_params_in_input=False)
    return tvm.transform.Sequential(
        [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
    )(mod)


def fuse_passes(target):
    """The Relax passes that turn operators into fused TIR functions, exactly as
    `ms.relax_integration.compile_relax` runs them, so database keys match at export."""
    from tvm import relax
    from tvm.relax import pipeline

    try:
        dispatch = list(pipeline.library_dispatch_passes(target))
    except (ValueError, AttributeError):
        dispatch = []
    return [
        *dispatch,
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]


def extract_tasks(mod, target):
    """MetaSchedule tasks of a Relax module (it must be fused first, or none are found)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    with target:
        fused = tvm.transform.Sequential(fuse_passes(target))(mod)
    return ms.relax_integration.extract_tasks(fused, target)
