"""Users' model files made plain before TVM's frontends read them.

ONNX: shape subgraphs (Shape -> Gather -> Concat -> Reshape), constant subgraphs and identity
chains are folded by ONNX Runtime's offline basic optimizer, since TVM's Relax importer
needs a Reshape's target shape as a constant once the input shapes are pinned.

TFLite: sparse weights (DENSIFY) and float16-stored weights (DEQUANTIZE of a constant) become
plain float32 constants: TVM's frontend crashes on a DEQUANTIZE fed by DENSIFY and folds
each float16 cast through a compiled kernel.

Both are deterministic functions of the file, so tune, export and bench import the same graph.
"""

from __future__ import annotations

import os
import tempfile

_SHAPE_OPS = {"Shape", "Size"}


def onnx_needs_folding(model) -> bool:
    """Does the graph compute anything from constants or shapes alone?"""
    const = {i.name for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            const.update(node.output)
    for node in model.graph.node:
        if node.op_type in _SHAPE_OPS or node.op_type == "Identity":
            return True
        inputs = [i for i in node.input if i]
        if node.op_type != "Constant" and inputs and all(i in const for i in inputs):
            return True
    return False


def fold_onnx(model_bytes: bytes) -> bytes:
    """The model after ONNX Runtime's basic (ONNX-operator-only) graph optimizations, when
    it has anything to fold; otherwise the bytes unchanged."""
    import onnx

    model = onnx.load_from_string(model_bytes)
    if not onnx_needs_folding(model):
        return model_bytes
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 3
    fd, path = tempfile.mkstemp(suffix=".onnx", prefix="tvmtui-fold-")
    os.close(fd)
    try:
        so.optimized_model_filepath = path
        ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        with open(path, "rb") as f:
            folded = onnx.load_from_string(f.read())
    finally:
        os.unlink(path)
    folded.ClearField("metadata_props")
    return folded.SerializeToString(deterministic=True)


def normalize_tflite(model_bytes: bytes) -> bytes:
    """DENSIFY and constant float16 DEQUANTIZE folded into float32 weight buffers."""
    import numpy as np
    import tflite

    reader = tflite.Model.GetRootAsModel(model_bytes, 0)
    names = builtin_names()
    todo: dict[tuple[int, int], str] = {}
    for s in range(reader.SubgraphsLength()):
        g = reader.Subgraphs(s)
        for i in range(g.OperatorsLength()):
            op = g.Operators(i)
            code = reader.OperatorCodes(op.OpcodeIndex())
            name = names.get(max(code.DeprecatedBuiltinCode(), code.BuiltinCode()))
            if name in ("DENSIFY", "DEQUANTIZE"):
                todo[s, i] = name
    if not todo:
        return model_bytes
    from ai_edge_litert import schema_py_generated as S

    model = S.ModelT.InitFromPackedBuf(model_bytes, 0)
    float32 = S.TensorType.FLOAT32
    dtypes = {S.TensorType.FLOAT16: np.float16, S.TensorType.FLOAT32: np.float32,
              S.TensorType.INT8: np.int8, S.TensorType.UINT8: np.uint8}
    changed = False
    for s, subgraph in enumerate(model.subgraphs):
        g = reader.Subgraphs(s)
        values: dict[int, np.ndarray] = {}  # tensor index -> its now-constant value
        keep = []
        for i, op in enumerate(subgraph.operators):
            name = todo.get((s, i))
            if name == "DENSIFY":
                from tvm.relax.frontend.tflite.tflite_frontend import (
                    prepare_dense_matrix_from_sparse,
                )

                src = g.Tensors(op.inputs[0])
                raw = np.frombuffer(reader.Buffers(src.Buffer()).DataAsNumpy().tobytes(),
                                    dtypes[src.Type()])
                _, dense = prepare_dense_matrix_from_sparse(src, raw, np.dtype(dtypes[src.Type()]).name)
                values[op.outputs[0]] = np.asarray(dense).reshape(
                    [int(d) for d in subgraph.tensors[op.outputs[0]].shape])
                continue
            if name == "DEQUANTIZE":
                src = _constant(model, subgraph, values, op.inputs[0], dtypes)
                if src is not None and subgraph.tensors[op.inputs[0]].type == S.TensorType.FLOAT16:
                    values[op.outputs[0]] = src.astype(np.float32)
                    continue
            keep.append(op)
        if len(keep) == len(subgraph.operators):
            continue
        changed = True
        subgraph.operators = keep
        used = {int(t) for op in keep for t in op.inputs} | {int(t) for t in subgraph.outputs}
        for t, value in values.items():
            if t not in used:
                continue
            tensor = subgraph.tensors[t]
            buf = S.BufferT()
            buf.data = np.frombuffer(np.ascontiguousarray(value).tobytes(), np.uint8)
            model.buffers.append(buf)
            tensor.buffer = len(model.buffers) - 1
            tensor.type = float32 if value.dtype == np.float32 else tensor.type
            tensor.sparsity = None
    if not changed:
        return model_bytes
    from tvmtui.graph.tflite_schema import pack_model

    return pack_model(model, len(model_bytes) * 2 + 1024)


def _constant(model, subgraph, values: dict, t: int, dtypes: dict):
    """Tensor `t`'s value when it is a plain (dense, stored) constant, else None."""
    import numpy as np

    if t in values:
        return values[t]
    tensor = subgraph.tensors[t]
    data = model.buffers[tensor.buffer].data if tensor.buffer else None
    if data is None or len(data) == 0 or tensor.sparsity is not None or tensor.type not in dtypes:
        return None
    return np.frombuffer(bytes(bytearray(data)), dtypes[tensor.type]).reshape(
        [int(d) for d in tensor.shape])


def builtin_names() -> dict[int, str]:
    from tflite.BuiltinOperator import BuiltinOperator

    return {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
