"""ONNX LSTM, GRU and RNN written out, for the pinned sequence length, as operators TVM's
Relax ONNX frontend imports (MatMul, Add, Slice, Squeeze, Concat, the activations).

Per direction, the input projection of every step is one MatMul over the whole sequence
(weights transposed once, both biases folded into it); each step then adds its hidden
state's MatMul, slices the gates and applies the cell. `sequence_lens` freezes a batch
row's state past its length and zeroes its output there, which also gives the reverse
direction its per-row start. Follows the ONNX operator definitions (gate orders iofc and
zrh, peepholes iof, `clip` on the activations' inputs, `linear_before_reset`, `layout`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

RECURRENT = ("LSTM", "GRU", "RNN")

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"],
                 "RNN": ["Tanh"]}
# activation -> (ONNX op or composite, default alpha, default beta); None: takes no value
_ACTS: dict[str, tuple[float | None, float | None]] = {
    "sigmoid": (None, None), "tanh": (None, None), "relu": (None, None),
    "softsign": (None, None), "softplus": (None, None),
    "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None), "elu": (1.0, None),
    "hardsigmoid": (0.2, 0.5), "affine": (1.0, 0.0), "scaledtanh": (1.0, 1.0),
}
_OP_NAMES = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu", "softsign": "Softsign",
             "softplus": "Softplus", "leakyrelu": "LeakyRelu",
             "thresholdedrelu": "ThresholdedRelu", "elu": "Elu", "hardsigmoid": "HardSigmoid"}


class RecurrentError(ValueError):
    """A recurrent node this expansion cannot write out (the message names why)."""


@dataclass(frozen=True)
class _Act:
    name: str
    alpha: float | None
    beta: float | None


def has_recurrent(model) -> bool:
    return any(n.op_type in RECURRENT and n.domain in ("", "ai.onnx") for n in model.graph.node)


def expand_recurrent(model):
    """The model with every LSTM / GRU / RNN node replaced by its written-out steps (the
    same object, changed in place); needs static input shapes."""
    import onnx

    if not has_recurrent(model):
        return model
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None
                       for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.value_info, *inferred.graph.input]}
    consts = _constants(model)
    nodes = []
    for index, node in enumerate(model.graph.node):
        if node.op_type not in RECURRENT or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        emit = _Emitter(model, opset, f"{node.name or node.op_type + str(index)}/")
        _expand(node, emit, shapes, consts)
        nodes.extend(emit.nodes)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    _drop_unused(model, {i for n in model.graph.node for i in n.input}
                 | {o.name for o in model.graph.output})
    return model


def _drop_unused(model, used: set[str]) -> None:
    """Remove the weights only the replaced nodes read (their transposed copies stay)."""
    keep = [t for t in model.graph.initializer if t.name in used]
    if len(keep) == len(model.graph.initializer):
        return
    gone = {t.name for t in model.graph.initializer} - {t.name for t in keep}
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    inputs = [i for i in model.graph.input if i.name not in gone]
    del model.graph.input[:]
    model.graph.input.extend(inputs)


def _constants(model) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    found = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


class _Emitter:
    """Appends nodes (and initializers) under one name prefix."""

    def __init__(self, model, opset: int, prefix: str):
        self.model, self.opset, self.prefix = model, opset, prefix
        self.nodes: list = []
        self._n = 0

    def _name(self, what: str) -> str:
        self._n += 1
        return f"{self.prefix}{what}_{self._n}"

    def op(self, op_type: str, inputs: list[str], output: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        out = output or self._name(op_type)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self._name(op_type),
                                           **attrs))
        return out

    def const(self, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self._name("const")
        self.model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def step(self, x: str, t: int, axis: int = 0) -> str:
        """x[t] along `axis` (that axis dropped): a slice, not a Gather, whose index tensor
        MetaSchedule's runner would fill with random values and crash on."""
        part = self.slice(x, axis, t, t + 1)
        if self.opset < 13:
            return self.op("Squeeze", [part], axes=[axis])
        return self.op("Squeeze", [part, self.const(np.array([axis], np.int64))])

    def slice(self, x: str, axis: int, start: int, end: int) -> str:
        if self.opset < 10:
            return self.op("Slice", [x], axes=[axis], starts=[start], ends=[end])
        return self.op("Slice", [x, self.const(np.array([start], np.int64)),
                                 self.const(np.array([end], np.int64)),
                                 self.const(np.array([axis], np.int64))])

    def cols(self, x: str, start: int, end: int) -> str:
        """x[:, start:end] of a 2-D tensor."""
        return self.slice(x, 1, start, end)

    def reshape(self, x: str, shape: list[int]) -> str:
        return self.op("Reshape", [x, self.const(np.array(shape, np.int64))])

    def act(self, act: _Act, x: str) -> str:
        if act.name == "affine":
            scaled = self.op("Mul", [x, self.const(np.array(act.alpha, np.float32))])
            return self.op("Add", [scaled, self.const(np.array(act.beta, np.float32))])
        if act.name == "scaledtanh":
            inner = self.op("Mul", [x, self.const(np.array(act.beta, np.float32))])
            return self.op("Mul", [self.op("Tanh", [inner]),
                                   self.const(np.array(act.alpha, np.float32))])
        attrs: dict[str, Any] = {k: v for k, v in (("alpha", act.alpha), ("beta", act.beta))
                                 if v is not None}
        return self.op(_OP_NAMES[act.name], [x], None, **attrs)


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _activations(node, attrs: dict, dirs: int) -> list[list[_Act]]:
    """Per direction, the node's activations with the alpha / beta each one consumes."""
    names = [n.decode() if isinstance(n, bytes) else n for n in attrs.get("activations", [])]
    per_dir = len(_DEFAULT_ACTS[node.op_type])
    if not names:
        names = _DEFAULT_ACTS[node.op_type] * dirs
    elif len(names) == per_dir and dirs == 2:
        names = names * 2
    if len(names) != per_dir * dirs:
        raise RecurrentError(f"{len(names)} activations given, {per_dir * dirs} expected")
    alphas = list(attrs.get("activation_alpha", []))
    betas = list(attrs.get("activation_beta", []))
    acts = []
    for name in names:
        key = name.lower()
        if key not in _ACTS:
            raise RecurrentError(f"activation {name} is not one ONNX defines for recurrent ops")
        alpha, beta = _ACTS[key]
        if alpha is not None and alphas:
            alpha = float(alphas.pop(0))
        if beta is not None and betas:
            beta = float(betas.pop(0))
        acts.append(_Act(key, alpha, beta))
    return [acts[d * per_dir:(d + 1) * per_dir] for d in range(dirs)]


def _expand(node, emit: _Emitter, shapes: dict, consts: dict) -> None:
    """Write out one recurrent node (its outputs keep their names)."""
    attrs = _attrs(node)
    kind = node.op_type
    gates = _GATES[kind]
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("forward", "reverse", "bidirectional"):
        raise RecurrentError(f"direction {direction!r} is not forward, reverse or bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = int(attrs["hidden_size"]) if "hidden_size" in attrs else None
    layout = int(attrs.get("layout", 0))
    ins = list(node.input) + [""] * (8 - len(node.input))
    x_shape = shapes.get(ins[0])
    if x_shape is None and ins[0] in consts:
        x_shape = list(consts[ins[0]].shape)
    if not x_shape or len(x_shape) != 3 or any(d is None for d in x_shape):
        raise RecurrentError("its input's shape is not static; pin the model's inputs with --shape")
    seq, batch, _ = (x_shape[1], x_shape[0], x_shape[2]) if layout else x_shape
    w_shape = consts[ins[1]].shape if ins[1] in consts else shapes.get(ins[1])
    if hidden is None:
        if not w_shape or w_shape[1] is None:
            raise RecurrentError("hidden_size is not set and its weights' shape is unknown")
        hidden = int(w_shape[1]) // gates
    if ins[4] and ins[4] in consts and np.all(consts[ins[4]] == seq):
        ins[4] = ""  # every row runs the whole sequence: nothing to mask
    if ins[4] and emit.opset < 9:
        raise RecurrentError("sequence_lens needs opset 9 or later (Where)")
    acts = _activations(node, attrs, dirs)
    clip = float(attrs["clip"]) if "clip" in attrs else None
    x = ins[0] if not layout else emit.op("Transpose", [ins[0]], perm=[1, 0, 2])
    lens = None
    if ins[4]:
        lens = emit.op("Cast", [ins[4]], to=7)  # int64, as the step constants
    cell = _Cell(kind, hidden, batch, clip, attrs, emit)
    results = []
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        weights = _DirWeights.read(ins, d, kind, hidden, emit, consts, layout, cell.lbr)
        results.append(cell.run(x, seq, reverse, weights, acts[d], lens))
    _outputs(node, results, layout, batch, hidden, emit)


@dataclass
class _DirWeights:
    w_t: str  # (input, gates*H)
    r_t: str  # (H, gates*H)
    bias: str | None  # added to the input projection
    r_bias_h: str | None  # GRU with linear_before_reset: Rbh, inside the reset product
    r_zr_t: str | None  # GRU without it: R's update and reset columns (H, 2H), and
    r_h_t: str | None  # its hidden columns (H, H), multiplied after the reset
    peep: list[str] | None  # LSTM: Pi, Po, Pf as (H,)
    h0: str | None
    c0: str | None

    @classmethod
    def read(cls, ins: list[str], d: int, kind: str, hidden: int, emit: _Emitter,
             consts: dict, layout: int, lbr: bool) -> "_DirWeights":
        gates = _GATES[kind]

        def transposed(name: str) -> str:
            if name in consts:
                return emit.const(np.ascontiguousarray(consts[name][d].T.astype(np.float32)))
            return emit.op("Transpose", [emit.step(name, d)], perm=[1, 0])

        bias = r_bias_h = None
        if ins[3]:
            if ins[3] not in consts:
                raise RecurrentError("its bias B is computed at run time; only constant biases")
            b = consts[ins[3]][d].astype(np.float32)
            wb, rb = b[:gates * hidden], b[gates * hidden:].copy()
            if kind == "GRU" and lbr:
                r_bias_h = emit.const(rb[2 * hidden:].copy())
                rb[2 * hidden:] = 0
            bias = emit.const(wb + rb)
        peep = None
        if kind == "LSTM" and len(ins) > 7 and ins[7]:
            if ins[7] not in consts:
                raise RecurrentError("its peepholes P are computed at run time")
            p = consts[ins[7]][d].astype(np.float32)
            peep = [emit.const(p[k * hidden:(k + 1) * hidden].copy()) for k in range(3)]

        def state(name: str) -> str | None:
            if not name:
                return None
            return emit.step(name, d, axis=1 if layout else 0)

        r_t = transposed(ins[2])
        r_zr_t = r_h_t = None
        if kind == "GRU" and not lbr:
            r_zr_t, r_h_t = emit.cols(r_t, 0, 2 * hidden), emit.cols(r_t, 2 * hidden, 3 * hidden)
        return cls(transposed(ins[1]), r_t, bias, r_bias_h, r_zr_t, r_h_t, peep,
                   state(ins[5]), state(ins[6]) if kind == "LSTM" else None)


class _Cell:
    """The step function of one kind of cell, over a whole sequence."""

    def __init__(self, kind: str, hidden: int, batch: int, clip: float | None, attrs: dict,
                 emit: _Emitter):
        self.kind, self.h, self.batch, self.clip, self.emit = kind, hidden, batch, clip, emit
        self.lbr = bool(attrs.get("linear_before_reset", 0))
        self.input_forget = bool(attrs.get("input_forget", 0))

    def _pre(self, x: str) -> str:
        if self.clip is None:
            return x
        e = self.emit
        low = e.op("Max", [x, e.const(np.array(-self.clip, np.float32))])
        return e.op("Min", [low, e.const(np.array(self.clip, np.float32))])

    def run(self, x: str, seq: int, reverse: bool, w: _DirWeights, acts: list[_Act],
            lens: str | None) -> tuple[list[str], str, str | None]:
        """(outputs per time step in time order, last hidden state, last cell state)."""
        e, hid = self.emit, self.h
        proj = e.op("MatMul", [x, w.w_t])
        if w.bias is not None:
            proj = e.op("Add", [proj, w.bias])
        h, c = w.h0, w.c0
        if self.kind == "LSTM" and c is None:
            c = e.const(np.zeros((self.batch, hid), np.float32))
        ys: dict[int, str] = {}
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            xt = e.step(proj, t)
            if self.kind == "LSTM":
                assert c is not None
                h_new, c_new = self._lstm(xt, h, c, w, acts)
            elif self.kind == "GRU":
                h_new, c_new = self._gru(xt, h, w, acts), None
            else:
                gate = xt if h is None else e.op("Add", [xt, e.op("MatMul", [h, w.r_t])])
                h_new, c_new = e.act(acts[0], self._pre(gate)), None
            if lens is not None:
                live = e.reshape(e.op("Less", [e.const(np.array(t, np.int64)), lens]),
                                 [self.batch, 1])
                prev_h = h if h is not None else e.const(np.zeros((self.batch, hid), np.float32))
                ys[t] = e.op("Where", [live, h_new, e.const(np.zeros((), np.float32))])
                h_new = e.op("Where", [live, h_new, prev_h])
                if c_new is not None:
                    assert c is not None
                    c_new = e.op("Where", [live, c_new, c])
            else:
                ys[t] = h_new
            h, c = h_new, c_new
        assert h is not None
        return [ys[t] for t in range(seq)], h, c

    def _lstm(self, xt: str, h: str | None, c: str, w: _DirWeights,
              acts: list[_Act]) -> tuple[str, str]:
        e, hid = self.emit, self.h
        g_all = xt if h is None else e.op("Add", [xt, e.op("MatMul", [h, w.r_t])])
        i, o, f, g = (e.cols(g_all, k * hid, (k + 1) * hid) for k in range(4))
        if w.peep is not None:
            i = e.op("Add", [i, e.op("Mul", [w.peep[0], c])])
            f = e.op("Add", [f, e.op("Mul", [w.peep[2], c])])
        i = e.act(acts[0], self._pre(i))
        if self.input_forget:  # coupled, as ONNX Runtime has it: the forget gate is 1 - i
            f = e.op("Sub", [e.const(np.array(1.0, np.float32)), i])
        else:
            f = e.act(acts[0], self._pre(f))
        g = e.act(acts[1], self._pre(g))
        c_new = e.op("Add", [e.op("Mul", [f, c]), e.op("Mul", [i, g])])
        if w.peep is not None:
            o = e.op("Add", [o, e.op("Mul", [w.peep[1], c_new])])
        o = e.act(acts[0], self._pre(o))
        return e.op("Mul", [o, e.act(acts[2], c_new)]), c_new

    def _gru(self, xt: str, h: str | None, w: _DirWeights, acts: list[_Act]) -> str:
        e, hid = self.emit, self.h
        xz, xr, xh = (e.cols(xt, k * hid, (k + 1) * hid) for k in range(3))
        if h is None:  # a zero state: its products vanish (and Rbh, reset, is what is left)
            z = e.act(acts[0], self._pre(xz))
            pre_h = xh
            if self.lbr and w.r_bias_h is not None:
                r = e.act(acts[0], self._pre(xr))
                pre_h = e.op("Add", [xh, e.op("Mul", [r, w.r_bias_h])])
            hh = e.act(acts[1], self._pre(pre_h))
            return e.op("Sub", [hh, e.op("Mul", [z, hh])])
        if self.lbr:
            rh = e.op("MatMul", [h, w.r_t])
            hz, hr, hh_in = (e.cols(rh, k * hid, (k + 1) * hid) for k in range(3))
            if w.r_bias_h is not None:
                hh_in = e.op("Add", [hh_in, w.r_bias_h])
            z = e.act(acts[0], self._pre(e.op("Add", [xz, hz])))
            r = e.act(acts[0], self._pre(e.op("Add", [xr, hr])))
            pre_h = e.op("Add", [xh, e.op("Mul", [r, hh_in])])
        else:
            assert w.r_zr_t is not None and w.r_h_t is not None
            zr = e.op("MatMul", [h, w.r_zr_t])
            hz, hr = e.cols(zr, 0, hid), e.cols(zr, hid, 2 * hid)
            z = e.act(acts[0], self._pre(e.op("Add", [xz, hz])))
            r = e.act(acts[0], self._pre(e.op("Add", [xr, hr])))
            reset = e.op("Mul", [r, h])
            pre_h = e.op("Add", [xh, e.op("MatMul", [reset, w.r_h_t])])
        hh = e.act(acts[1], self._pre(pre_h))
        # (1 - z) * hh + z * h
        return e.op("Add", [hh, e.op("Mul", [z, e.op("Sub", [h, hh])])])


def _outputs(node, results, layout: int, batch: int, hidden: int, emit: _Emitter) -> None:
    """Y, Y_h (and Y_c) under the node's own output names, from each direction's steps."""
    outs = list(node.output) + [""] * (3 - len(node.output))
    dirs = len(results)
    if outs[0]:
        per_dir = []
        for ys, _, _ in results:
            steps = [emit.reshape(y, [1, 1, batch, hidden]) for y in ys]
            per_dir.append(steps[0] if len(steps) == 1 else emit.op("Concat", steps, axis=0))
        y = per_dir[0] if dirs == 1 else emit.op("Concat", per_dir, axis=1)
        if layout:
            emit.op("Transpose", [y], outs[0], perm=[2, 0, 1, 3])
        else:
            emit.op("Identity", [y], outs[0])
    for slot, pick in ((1, 1), (2, 2)):
        if len(outs) <= slot or not outs[slot]:
            continue
        finals = [emit.reshape(r[pick], [1, batch, hidden]) for r in results]
        both = finals[0] if dirs == 1 else emit.op("Concat", finals, axis=0)
        if layout:
            emit.op("Transpose", [both], outs[slot], perm=[1, 0, 2])
        else:
            emit.op("Identity", [both], outs[slot])
