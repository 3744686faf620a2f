"""ONNX and TFLite bytes -> Relax IRModule in inference form (weights bound as constants)."""

from __future__ import annotations


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


def load_relax(fmt: str, model_bytes: bytes, input_shapes: dict[str, list[int]]):
    """The graph every variant starts from: imported, with constant subgraphs folded once
    (BatchNorm into weights, weight transposes), so variants see plain constant weights."""
    from tvm import relax

    return relax.transform.FoldConstant()(model_to_relax(fmt, model_bytes, input_shapes))
