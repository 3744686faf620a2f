"""Small recurrent models written in code, for the recurrent-operator tests: ONNX LSTM /
GRU / RNN nodes and TFLite sequence LSTMs, with seeded weights."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tvmtui.graph.tflite_schema import pack_model, schema

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def onnx_recurrent(kind: str, seq: int = 5, batch: int = 2, inputs: int = 7, hidden: int = 5,
                   direction: str = "forward", layout: int = 0, bias: bool = True,
                   initial: bool = False, peepholes: bool = False, lens: bool = False,
                   opset: int = 14, seed: int = 0, seq_symbol: str | None = None,
                   **attrs) -> bytes:
    """One recurrent node over graph inputs X (and L, H0, C0 when asked), all its outputs
    named Y, Y_h (, Y_c); extra `attrs` go on the node (clip, activations, ...); with
    `seq_symbol`, X's time axis is that symbol."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[kind]
    x_shape = [batch, seq, inputs] if layout else [seq, batch, inputs]
    s_shape = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    weights = {"W": rng.normal(0, 0.5, (dirs, g * hidden, inputs)),
               "R": rng.normal(0, 0.5, (dirs, g * hidden, hidden))}
    if bias:
        weights["B"] = rng.normal(0, 0.5, (dirs, 2 * g * hidden))
    if peepholes:
        weights["P"] = rng.normal(0, 0.5, (dirs, 3 * hidden))
    declared: list = list(x_shape)
    if seq_symbol:  # the time axis left symbolic, as exporters write it
        declared[1 if layout else 0] = seq_symbol
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, declared)]
    names = ["X", "W", "R", "B" if bias else ""]
    names.append("L" if lens else "")
    if lens:
        graph_inputs.append(helper.make_tensor_value_info("L", TensorProto.INT32, [batch]))
    for state in (["H0", "C0"] if kind == "LSTM" else ["H0"]):
        names.append(state if initial else "")
        if initial:
            graph_inputs.append(helper.make_tensor_value_info(state, TensorProto.FLOAT, s_shape))
    if peepholes:
        names.append("P")
    while names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h", "Y_c"][:3 if kind == "LSTM" else 2]
    y_shape = [batch, seq, dirs, hidden] if layout else [seq, dirs, batch, hidden]
    node = helper.make_node(kind, names, outs, name=f"{kind.lower()}0", hidden_size=hidden,
                            direction=direction, **({"layout": 1} if layout else {}), **attrs)
    graph = helper.make_graph(
        [node], "recurrent", graph_inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, y_shape if o == "Y" else s_shape)
         for o in outs],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def tflite_sequence_lstm(batch: int = 1, steps: int = 6, inputs: int = 5, units: int = 7,
                         cifg: bool = False, peepholes: bool = False, projection: int = 0,
                         layer_norm: bool = False, time_major: bool = False,
                         bidirectional: bool = False, merge: bool = True,
                         cell_clip: float = 0.0, seed: int = 0) -> bytes:
    """A float TFLite model of one UNIDIRECTIONAL_ (or BIDIRECTIONAL_) SEQUENCE_LSTM, laid
    out as the TFLite converter writes a Keras LSTM: variable state tensors, TANH."""
    S = schema()
    rng = np.random.default_rng(seed)
    tensors: list = []
    buffers = [S.BufferT()]

    def tensor(name: str, shape, data: np.ndarray | None = None, variable: bool = False) -> int:
        t = S.TensorT()
        t.name, t.shape, t.type, t.buffer = name.encode(), list(shape), S.TensorType.FLOAT32, 0
        t.isVariable = variable
        if data is not None:
            b = S.BufferT()
            b.data = np.frombuffer(np.asarray(data, np.float32).tobytes(), np.uint8)
            buffers.append(b)
            t.buffer = len(buffers) - 1
        tensors.append(t)
        return len(tensors) - 1

    def weight(name: str, shape) -> int:
        return tensor(name, shape, rng.normal(0, 0.4, shape))

    outputs = projection or units
    x_shape = [steps, batch, inputs] if time_major else [batch, steps, inputs]
    x = tensor("input", x_shape)

    def direction(tag: str) -> list[int]:
        ids = [-1 if cifg else weight(f"{tag}i2i", [units, inputs])]
        ids += [weight(f"{tag}i2{g}", [units, inputs]) for g in "fco"]
        ids += [-1 if cifg else weight(f"{tag}r2i", [units, outputs])]
        ids += [weight(f"{tag}r2{g}", [units, outputs]) for g in "fco"]
        ids += [weight(f"{tag}c2{g}", [units]) if peepholes and not (cifg and g == "i") else -1
                for g in "ifo"]
        ids += [-1 if cifg else weight(f"{tag}bi", [units])]
        ids += [weight(f"{tag}b{g}", [units]) for g in "fco"]
        ids += [weight(f"{tag}proj", [projection, units]), weight(f"{tag}projb", [projection])] \
            if projection else [-1, -1]
        return ids

    op = S.OperatorT()
    oc = S.OperatorCodeT()
    width = 2 * outputs if bidirectional and merge else outputs
    y_shape = [steps, batch, width] if time_major else [batch, steps, width]
    if not bidirectional:
        ids = [x, *direction("")]
        ids += [tensor("h", [batch, outputs], variable=True),
                tensor("c", [batch, units], variable=True)]
        ids += [weight(f"ln{g}", [units]) if layer_norm and not (cifg and g == "i") else -1
                for g in "ifco"]
        code = S.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
        opts = S.UnidirectionalSequenceLSTMOptionsT()
        op.builtinOptionsType = S.BuiltinOptions.UnidirectionalSequenceLSTMOptions
        outs = [tensor("output", y_shape)]
    else:
        ids = [x, *direction("fw"), *direction("bw")]
        ids += [tensor(n, [batch, w], variable=True)
                for n, w in (("fh", outputs), ("fc", units), ("bh", outputs), ("bc", units))]
        ids += [-1] * 9
        code = S.BuiltinOperator.BIDIRECTIONAL_SEQUENCE_LSTM
        opts = S.BidirectionalSequenceLSTMOptionsT()
        opts.mergeOutputs = merge
        op.builtinOptionsType = S.BuiltinOptions.BidirectionalSequenceLSTMOptions
        outs = [tensor("output", y_shape)] if merge else \
            [tensor("fw_output", y_shape), tensor("bw_output", y_shape)]
    opts.fusedActivationFunction = S.ActivationFunctionType.TANH
    opts.cellClip, opts.projClip, opts.timeMajor = cell_clip, 0.0, time_major
    op.builtinOptions = opts
    op.opcodeIndex, op.inputs, op.outputs = 0, ids, outs
    oc.builtinCode = code
    oc.deprecatedBuiltinCode, oc.version = min(code, 127), 1
    g = S.SubGraphT()
    g.tensors, g.operators, g.inputs, g.outputs, g.name = tensors, [op], [x], outs, b"main"
    model = S.ModelT()
    model.version, model.buffers, model.subgraphs, model.operatorCodes = 3, buffers, [g], [oc]
    return pack_model(model)
