"""Small generated models with the traits real users' files have (shape-computing
subgraphs, symbolic batches, float16 and sparse weights, unsupported quantized operators)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tvmtui.graph.tflite_schema import opcode_index, pack_model, schema
from tvmtui.workloads.tflite_writer import TfliteNet


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def shape_reshape_onnx(batch: str | int = 1, height: str | int = 9) -> bytes:
    """Conv -> ReLU -> Reshape whose target shape is computed at run time (Shape -> Gather ->
    Unsqueeze -> Concat), plus an Identity chain on a constant, as exporters write them; an
    input of `batch` x 4 x `height` x 7 (a str: a symbolic dimension)."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((8, 4, 3, 3)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    nodes = [
        helper.make_node("Identity", ["w0"], ["w1"], name="id_w"),
        helper.make_node("Conv", ["input", "w1", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["r", "target"], ["output"], name="reshape"),
    ]
    inits = [_init("w0", w), _init("b", bias), _init("zero", np.array(0, np.int64)),
             _init("axes", np.array([0], np.int64)), _init("minus_one", np.array([-1], np.int64))]
    graph = helper.make_graph(
        nodes, "shape_reshape",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 4, height, 7])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, None])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def small_cnn_tflite() -> bytes:
    """Conv 3x3 -> ReLU -> global pool -> dense: the float model to re-store below."""
    rng = np.random.default_rng(3)
    net = TfliteNet("small_cnn", [1, 4, 10, 10])
    x = net.relu(net.conv("input", (rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32),
                          rng.standard_normal(8).astype(np.float32), pad=1))
    x = net.global_avg_pool(x)
    w = (rng.standard_normal((6, 8)) * 0.5).astype(np.float32)
    w[rng.random(w.shape) < 0.6] = 0.0  # mostly zeros, as pruned models are
    return net.finish(net.dense(x, w, rng.standard_normal(6).astype(np.float32)))


def _reload(model_bytes: bytes):
    S = schema()
    return S, S.ModelT.InitFromPackedBuf(model_bytes, 0)


def _weights(S, model) -> list[int]:
    """Indices of the float32 weight tensors (the writer names them w_N)."""
    g = model.subgraphs[0]
    return [i for i, t in enumerate(g.tensors)
            if t.name.decode().startswith("w_") and t.type == S.TensorType.FLOAT32]


def _producer(S, model, source: int, target: int, op_name: str) -> None:
    """Make tensor `target` the output of OP(source), computed before everything else."""
    g = model.subgraphs[0]
    op = S.OperatorT()
    op.opcodeIndex = opcode_index(S, model, op_name)
    op.inputs, op.outputs = [source], [target]
    g.operators.insert(0, op)
    g.tensors[target].buffer = 0


def _new_tensor(S, model, like: int, suffix: bytes, data: bytes, dtype) -> int:
    g = model.subgraphs[0]
    t = S.TensorT()
    t.shape, t.type = list(g.tensors[like].shape), dtype
    t.name = g.tensors[like].name + suffix
    buf = S.BufferT()
    buf.data = np.frombuffer(data, np.uint8)
    model.buffers.append(buf)
    t.buffer = len(model.buffers) - 1
    g.tensors.append(t)
    return len(g.tensors) - 1


def _value(S, model, index: int) -> np.ndarray:
    t = model.subgraphs[0].tensors[index]
    raw = bytes(bytearray(model.buffers[t.buffer].data))
    dtype = np.float16 if t.type == S.TensorType.FLOAT16 else np.float32
    return np.frombuffer(raw, dtype).reshape(list(t.shape))


def with_float16_weights(model_bytes: bytes) -> bytes:
    """Every weight stored as float16 behind a DEQUANTIZE, as converters' fp16 mode does."""
    S, model = _reload(model_bytes)
    for w in _weights(S, model):
        half = _value(S, model, w).astype(np.float16)
        src = _new_tensor(S, model, w, b"_fp16", half.tobytes(), S.TensorType.FLOAT16)
        _producer(S, model, src, w, "DEQUANTIZE")
    return pack_model(model)


def with_sparse_dense_weight(model_bytes: bytes) -> bytes:
    """The FULLY_CONNECTED weight stored sparse (CSR rows) behind a DENSIFY (behind the
    DEQUANTIZE of float16 weights, when there is one)."""
    S, model = _reload(model_bytes)
    g = model.subgraphs[0]
    fc = opcode_index(S, model, "FULLY_CONNECTED")
    w = next(op.inputs[1] for op in g.operators if op.opcodeIndex == fc)
    dq = opcode_index(S, model, "DEQUANTIZE")
    w = next((op.inputs[0] for op in g.operators if op.opcodeIndex == dq and op.outputs[0] == w), w)
    dense = _value(S, model, w)
    rows, cols = dense.shape
    segments, indices, values = [0], [], []
    for r in range(rows):
        nz = np.nonzero(dense[r])[0]
        indices.extend(int(c) for c in nz)
        values.extend(float(dense[r, c]) for c in nz)
        segments.append(len(indices))
    src = _new_tensor(S, model, w, b"_sparse", np.array(values, dense.dtype).tobytes(),
                      g.tensors[w].type)
    sp = S.SparsityParametersT()
    sp.traversalOrder, sp.blockMap = [0, 1], []
    d0, d1 = S.DimensionMetadataT(), S.DimensionMetadataT()
    d0.format, d0.denseSize = S.DimensionType.DENSE, rows
    d1.format = S.DimensionType.SPARSE_CSR
    seg, idx = S.Int32VectorT(), S.Int32VectorT()
    seg.values, idx.values = segments, indices
    d1.arraySegmentsType, d1.arraySegments = S.SparseIndexVector.Int32Vector, seg
    d1.arrayIndicesType, d1.arrayIndices = S.SparseIndexVector.Int32Vector, idx
    sp.dimMetadata = [d0, d1]
    g.tensors[src].sparsity = sp
    _producer(S, model, src, w, "DENSIFY")
    return pack_model(model)


def int8_strided_slice_tflite() -> bytes:
    """An int8 model whose only operator is a quantized STRIDED_SLICE (refused by TVM)."""
    S = schema()

    def tensor(name: str, shape, dtype, buffer: int = 0, quant: bool = False):
        t = S.TensorT()
        t.name, t.shape, t.type, t.buffer = name.encode(), list(shape), dtype, buffer
        if quant:
            q = S.QuantizationParametersT()
            q.scale, q.zeroPoint = [0.05], [0]
            t.quantization = q
        return t

    buffers = [S.BufferT()]
    for arr in (np.array([0, 0], np.int32), np.array([1, 4], np.int32), np.array([1, 1], np.int32)):
        b = S.BufferT()
        b.data = np.frombuffer(arr.tobytes(), np.uint8)
        buffers.append(b)
    g = S.SubGraphT()
    g.tensors = [tensor("input", [1, 8], S.TensorType.INT8, quant=True),
                 tensor("begin", [2], S.TensorType.INT32, 1),
                 tensor("end", [2], S.TensorType.INT32, 2),
                 tensor("strides", [2], S.TensorType.INT32, 3),
                 tensor("sliced", [1, 4], S.TensorType.INT8, quant=True)]
    op = S.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [0, 1, 2, 3], [4]
    op.builtinOptionsType = S.BuiltinOptions.StridedSliceOptions
    op.builtinOptions = S.StridedSliceOptionsT()
    g.operators, g.inputs, g.outputs, g.name = [op], [0], [4], b"main"
    oc = S.OperatorCodeT()
    oc.builtinCode = S.BuiltinOperator.STRIDED_SLICE
    oc.deprecatedBuiltinCode, oc.version = S.BuiltinOperator.STRIDED_SLICE, 1
    model = S.ModelT()
    model.version, model.buffers, model.subgraphs, model.operatorCodes = 3, buffers, [g], [oc]
    return pack_model(model)


def padded_residual_onnx() -> bytes:
    """BlazeFace's residual block: conv 8->16, and the input zero-padded from 8 to 16
    channels as the skip, added, ReLU. MetaSchedule's default space for the fused block
    raises a ScheduleError ('reverse-compute-at') in TVM 0.27."""
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["input", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Pad", ["input", "pads"], ["skip"], name="channel_pad"),
        helper.make_node("Add", ["c", "skip"], ["a"], name="residual"),
        helper.make_node("Relu", ["a"], ["output"], name="relu"),
    ]
    inits = [_init("w", w), _init("b", rng.standard_normal(16).astype(np.float32)),
             _init("pads", np.array([0, 0, 0, 0, 0, 8, 0, 0], np.int64))]
    graph = helper.make_graph(
        nodes, "padded_residual",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 16, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def dynamically_quantized_onnx(tmp_path, conv: bool) -> bytes:
    """ONNX Runtime's dynamic quantizer (DynamicQuantizeLinear, then MatMulInteger or
    ConvInteger) on a small float model: two MatMuls (64 -> 33 -> 10) with a ReLU between,
    after a 3x3 conv 3->8 when `conv`."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(5)
    first = 8 * 6 * 6 if conv else 64
    nodes = [helper.make_node("MatMul", ["flat", "m1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "m2"], ["output"])]
    inits = [_init("m1", rng.standard_normal((first, 33)).astype(np.float32) * 0.1),
             _init("m2", rng.standard_normal((33, 10)).astype(np.float32) * 0.2)]
    if conv:
        nodes[:0] = [helper.make_node("Conv", ["input", "w"], ["c"]),
                     helper.make_node("Reshape", ["c", "shape"], ["flat"])]
        inits += [_init("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
                  _init("shape", np.array([1, -1], np.int64))]
        shape = [1, 3, 8, 8]
    else:
        nodes[0].input[0] = "input"
        shape = [1, 64]
    graph = helper.make_graph(
        nodes, "dynamic", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "float.onnx")
    quantize_dynamic(tmp_path / "float.onnx", tmp_path / "dynamic.onnx",
                     weight_type=QuantType.QInt8)
    return (tmp_path / "dynamic.onnx").read_bytes()


def constant_gather_onnx() -> bytes:
    """A MatMul's result indexed by a constant (`y[3]`, as exporters write a time step or
    a class token): its take kernel reads the index tensor as an address."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("MatMul", ["input", "w"], ["y"]),
             helper.make_node("Gather", ["y", "index"], ["output"], axis=0)]
    graph = helper.make_graph(
        nodes, "constant_gather",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [8, 1, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4])],
        [_init("index", np.array(3, np.int64)),
         _init("w", rng.standard_normal((16, 4)).astype(np.float32))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def if_branch_tflite(inputs: int = 24, outputs: int = 5) -> bytes:
    """A wake-word head's shape: a fully connected score picks, through an IF, one of two
    fully connected branches, whose weights the main graph passes to them as inputs."""
    S = schema()
    rng = np.random.default_rng(7)
    model = S.ModelT()
    model.version, model.buffers, model.operatorCodes = 3, [S.BufferT()], []

    def buffer(arr: np.ndarray) -> int:
        b = S.BufferT()
        b.data = np.frombuffer(arr.tobytes(), np.uint8)
        model.buffers.append(b)
        return len(model.buffers) - 1

    def tensor(g, name: str, shape, dtype=S.TensorType.FLOAT32, data=None) -> int:
        t = S.TensorT()
        t.name, t.shape, t.type = name.encode(), list(shape), dtype
        t.buffer = 0 if data is None else buffer(data)
        g.tensors.append(t)
        return len(g.tensors) - 1

    def op(g, name: str, ins, outs, options_type=None, options=None) -> None:
        o = S.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = opcode_index(S, model, name), list(ins), list(outs)
        if options is not None:
            o.builtinOptionsType, o.builtinOptions = options_type, options
        g.operators.append(o)

    def fc_options():
        return S.BuiltinOptions.FullyConnectedOptions, S.FullyConnectedOptionsT()

    def weights(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    main, then, other = S.SubGraphT(), S.SubGraphT(), S.SubGraphT()
    for g in (main, then, other):
        g.tensors, g.operators = [], []
    x = tensor(main, "x", [1, inputs])
    score_w = tensor(main, "score_w", [1, inputs], data=weights(1, inputs))
    score_b = tensor(main, "score_b", [1], data=np.zeros(1, np.float32))
    score = tensor(main, "score", [1, 1])
    op(main, "FULLY_CONNECTED", [x, score_w, score_b], [score], *fc_options())
    zero = tensor(main, "zero", [], data=np.zeros((), np.float32))
    keep = tensor(main, "keep", [1, 1], S.TensorType.BOOL)
    op(main, "GREATER_EQUAL", [score, zero], [keep])
    new_shape = tensor(main, "new_shape", [0], S.TensorType.INT32, np.zeros(0, np.int32))
    cond = tensor(main, "cond", [], S.TensorType.BOOL)
    reshape = S.ReshapeOptionsT()
    reshape.newShape = []
    op(main, "RESHAPE", [keep, new_shape], [cond], S.BuiltinOptions.ReshapeOptions, reshape)
    passed = [x]
    for branch in ("then", "else"):
        passed.append(tensor(main, f"{branch}_w", [outputs, inputs],
                             data=weights(outputs, inputs)))
        passed.append(tensor(main, f"{branch}_b", [outputs],
                             data=rng.standard_normal(outputs).astype(np.float32)))
    y = tensor(main, "y", [1, outputs])
    choice = S.IfOptionsT()
    choice.thenSubgraphIndex, choice.elseSubgraphIndex = 1, 2
    op(main, "IF", [cond, *passed], [y], S.BuiltinOptions.IfOptions, choice)
    main.inputs, main.outputs, main.name = [x], [y], b"main"
    for g, pick, name in ((then, 1, b"then"), (other, 3, b"else")):
        args = [tensor(g, f"arg{i}", main.tensors[t].shape) for i, t in enumerate(passed)]
        out = tensor(g, "out", [1, outputs])
        op(g, "FULLY_CONNECTED", [args[0], args[pick], args[pick + 1]], [out], *fc_options())
        g.inputs, g.outputs, g.name = args, [out], name
    model.subgraphs = [main, then, other]
    return pack_model(model)


def batch_matmul_tflite() -> bytes:
    """BATCH_MATMULs as audio front ends write them (openWakeWord's melspectrogram): a
    batch of frames times a shared constant matrix, a Gram matrix (adj_y) and a product
    with the first operand transposed (adj_x); odd sizes."""
    rng = np.random.default_rng(11)
    net = TfliteNet("batch_matmuls", [1, 5, 7])

    def matmul(a: str, b: str, out: list[int], adj_x: bool = False, adj_y: bool = False) -> str:
        opts = net._options("BatchMatMulOptions", adjX=adj_x, adjY=adj_y)
        return net._op("BATCH_MATMUL", [a, b], out, opts, "BatchMatMulOptions")

    w = net._const((rng.standard_normal((7, 6)) / 3).astype(np.float32), "w")
    frames = matmul("input", w, [1, 5, 6])
    gram = matmul("input", "input", [1, 5, 5], adj_y=True)
    return net.finish(matmul(frames, gram, [1, 6, 5], adj_x=True))


def prelu_tflite() -> bytes:
    """PReLUs as MediaPipe's face and palm models write them: after a convolution (alpha
    shaped (1, 1, C)), after a depthwise one (alpha (C,)) and after a residual add (alpha
    (H, W, C), as a Keras PReLU without shared axes has it); some alphas negative, some
    above 1; odd channel counts."""
    rng = np.random.default_rng(24)
    net = TfliteNet("prelu", [1, 6, 9, 11])

    def prelu(x: str, shape: tuple[int, ...]) -> str:
        alpha = net._const(rng.uniform(-0.5, 1.5, shape).astype(np.float32), "alpha")
        return net._op("PRELU", [x, alpha], net.shapes[x])

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.4).astype(np.float32)

    x = prelu(net.conv("input", weights(12, 6, 3, 3), weights(12), pad=1), (1, 1, 12))
    y = prelu(net.conv(x, weights(12, 1, 3, 3), weights(12), pad=1, groups=12), (12,))
    y = prelu(net.add(net.conv(y, weights(12, 12, 1, 1), weights(12)), x), (9, 11, 12))
    return net.finish(net.conv(y, weights(7, 12, 1, 1), weights(7)))
