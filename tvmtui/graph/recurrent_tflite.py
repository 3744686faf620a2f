"""TFLite UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM written out step by
step in Relax, for float models, as LiteRT's float kernel computes them: with or without
the input gate (CIFG), peepholes, projection, layer normalization, cell and projection clip.

TVM's stock converters take only the coupled-gate form without peepholes or projection; the
TFLite converter writes a Keras LSTM with its input gate. As in `recurrent.py`, the input
projection of every step is one matrix product over the sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_LN_EPSILON = 1e-8  # LiteRT's kLayerNormEpsilon


def sequence_lstm(conv, op, bidirectional: bool):
    """The Relax value of one sequence LSTM operator; `conv` is the frontend's converter."""
    import tvm
    from tflite.BidirectionalSequenceLSTMOptions import BidirectionalSequenceLSTMOptions
    from tflite.UnidirectionalSequenceLSTMOptions import UnidirectionalSequenceLSTMOptions

    name = "BIDIRECTIONAL" if bidirectional else "UNIDIRECTIONAL"
    if conv.is_quantized(op):
        raise tvm.error.OpNotImplemented(f"quantized {name}_SEQUENCE_LSTM: use a float model")
    ins = conv.get_input_tensors(op)
    options: Any = (BidirectionalSequenceLSTMOptions() if bidirectional
                    else UnidirectionalSequenceLSTMOptions())
    table = op.BuiltinOptions()
    options.Init(table.Bytes, table.Pos)
    x_t = ins[0]
    time_major = bool(options.TimeMajor())
    shape = [int(d) for d in conv.get_tensor_shape(x_t)]
    if len(shape) != 3:
        raise tvm.error.OpNotImplemented(f"{name}_SEQUENCE_LSTM input of rank {len(shape)}")
    steps, batch = (shape[0], shape[1]) if time_major else (shape[1], shape[0])
    cell = _Cell(conv, options.FusedActivationFunction(), float(options.CellClip()),
                 float(options.ProjClip()), batch)
    x = conv.get_tensor_expr(x_t)
    if not bidirectional:
        lstm = _Direction.read(conv, ins[1:18], ins[18], ins[19], ins[20:24])
        out, h, c = cell.run(x, steps, time_major, lstm, reverse=False)
        _update_states(conv, ins[18], ins[19], h, c)
        return out
    if any(_present(t) for t in ins[39:48]):
        raise tvm.error.OpNotImplemented("BIDIRECTIONAL_SEQUENCE_LSTM with an auxiliary input")
    fw = _Direction.read(conv, ins[1:18], ins[35], ins[36], [])
    bw = _Direction.read(conv, ins[18:35], ins[37], ins[38], [])
    fw_out, fw_h, fw_c = cell.run(x, steps, time_major, fw, reverse=False)
    bw_out, bw_h, bw_c = cell.run(x, steps, time_major, bw, reverse=True)
    _update_states(conv, ins[35], ins[36], fw_h, fw_c)
    _update_states(conv, ins[37], ins[38], bw_h, bw_c)
    from tvm import relax

    if options.MergeOutputs():
        return relax.op.concat([fw_out, bw_out], axis=-1)
    return relax.Tuple([fw_out, bw_out])


def _present(tensor) -> bool:
    return tensor is not None and tensor.tensor_idx != -1


def _update_states(conv, h_tensor, c_tensor, h, c) -> None:
    """A variable state read after the operator holds its final value, as in LiteRT."""
    from tvm.relax.frontend.tflite.tflite_frontend import get_tensor_name

    for tensor, value in ((h_tensor, h), (c_tensor, c)):
        if _present(tensor) and not conv.has_expr(tensor.tensor_idx):
            conv.exp_tab.set_expr(get_tensor_name(conv.subgraph, tensor.tensor_idx), value,
                                  force_override=True)


@dataclass
class _Direction:
    """One direction's weights, as numpy, gates in the order [input], forget, cell, output."""

    w_in: np.ndarray  # (input, gates*units)
    w_rec: np.ndarray  # (outputs, gates*units)
    bias: np.ndarray  # (gates*units,)
    peep: dict[str, np.ndarray]  # "i", "f", "o" -> (units,)
    norm: list[np.ndarray] | None  # per gate, (units,)
    proj: tuple[np.ndarray, np.ndarray | None] | None  # (units, outputs)ᵀ weights, bias
    cifg: bool
    units: int
    h0: Any
    c0: Any

    @classmethod
    def read(cls, conv, w: list, h_state, c_state, norms: list) -> "_Direction":
        """From the 17 tensors [i2i, i2f, i2c, i2o, r2i, r2f, r2c, r2o, c2i, c2f, c2o, bi,
        bf, bc, bo, proj_w, proj_b] (absent ones have tensor_idx -1)."""
        def value(tensor) -> np.ndarray | None:
            if not _present(tensor):
                return None
            if conv.has_expr(tensor.tensor_idx):
                import tvm

                raise tvm.error.OpNotImplemented("an LSTM whose weights are computed at run time")
            return np.asarray(conv.get_tensor_value(tensor), np.float32)

        cifg = not _present(w[0])
        gates = [0, 1, 2, 3][1 if cifg else 0:]
        w_in = np.concatenate([value(w[g]) for g in gates], axis=0)
        w_rec = np.concatenate([value(w[4 + g]) for g in gates], axis=0)
        units = int(w_in.shape[0]) // len(gates)
        bias = np.concatenate([b if (b := value(w[11 + g])) is not None
                               else np.zeros(units, np.float32) for g in gates])
        peep = {k: p for k, i in (("i", 8), ("f", 9), ("o", 10))
                if (p := value(w[i])) is not None}
        norm_values = [value(t) for t in norms]
        norm = None
        if any(v is not None for v in norm_values):
            norm = [v if v is not None else np.ones(units, np.float32)
                    for v in norm_values][1 if cifg else 0:]
        proj_w = value(w[15])
        proj = (np.ascontiguousarray(proj_w.T), value(w[16])) if proj_w is not None else None
        outputs = proj_w.shape[0] if proj_w is not None else units
        return cls(np.ascontiguousarray(w_in.T), np.ascontiguousarray(w_rec.T), bias, peep,
                   norm, proj, cifg, units, _state(conv, h_state, outputs),
                   _state(conv, c_state, units))


def _state(conv, tensor, width: int):
    """A state's starting value: the graph's input when it is one, else its stored value
    (zeros when it stores none); None stands for zeros of `width`."""
    if not _present(tensor):
        return None
    if conv.has_expr(tensor.tensor_idx):
        return conv.get_expr(tensor.tensor_idx)
    try:
        value = np.asarray(conv.get_tensor_value(tensor), np.float32)
    except Exception:  # noqa: BLE001 - a variable tensor without a buffer starts at zero
        return None
    return None if value.size == 0 or not value.any() else value


class _Cell:
    """The LSTM step over a sequence, shared by both directions."""

    def __init__(self, conv, activation: int, cell_clip: float, proj_clip: float, batch: int):
        self.conv, self.activation, self.batch = conv, activation, batch
        self.cell_clip, self.proj_clip = cell_clip, proj_clip

    def emit(self, expr):
        return self.conv.bb.emit(expr)

    def const(self, value: np.ndarray):
        from tvm import relax

        return relax.const(np.ascontiguousarray(value, np.float32), "float32")

    def run(self, x, steps: int, time_major: bool, d: _Direction, reverse: bool):
        """(output over the sequence, last hidden state, last cell state)."""
        from tvm import relax

        op = relax.op
        axis = 0 if time_major else 1
        proj = self.emit(op.matmul(x, self.const(d.w_in)))
        if d.norm is None:
            proj = self.emit(op.add(proj, self.const(d.bias)))
        h = self.const(d.h0) if isinstance(d.h0, np.ndarray) else d.h0
        c = self.const(d.c0) if isinstance(d.c0, np.ndarray) else d.c0
        outs: dict[int, Any] = {}
        gates = 3 if d.cifg else 4
        for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
            xt = self.emit(op.reshape(op.strided_slice(proj, [axis], [t], [t + 1]),
                                      [self.batch, gates * d.units]))
            pre = xt if h is None else self.emit(op.add(xt, op.matmul(h, self.const(d.w_rec))))
            h, c = self._step(pre, c, d)
            outs[t] = h
        width = d.proj[0].shape[1] if d.proj is not None else d.units
        # Concatenated rather than stacked: ConvertLayout fails on relax.stack (IndexError).
        shape = [1, self.batch, width] if time_major else [self.batch, 1, width]
        rows = [self.emit(op.reshape(outs[t], shape)) for t in range(steps)]
        return self.emit(op.concat(rows, axis=axis)), h, c

    def _gate(self, pre, k: int, d: _Direction, peep_key: str, c):
        """Gate k's input to its activation: its columns, the peephole, the norm, the bias."""
        from tvm import relax

        op = relax.op
        u = d.units
        g = op.strided_slice(pre, [1], [k * u], [(k + 1) * u])
        if peep_key in d.peep and c is not None:
            g = op.add(g, op.multiply(self.const(d.peep[peep_key]), c))
        if d.norm is not None:
            g = self.emit(g)
            mean = self.emit(op.mean(g, axis=[1], keepdims=True))
            centered = self.emit(op.subtract(g, mean))
            var = op.mean(op.multiply(centered, centered), axis=[1], keepdims=True)
            scale = op.rsqrt(op.add(var, relax.const(_LN_EPSILON, "float32")))
            g = op.multiply(op.multiply(centered, scale), self.const(d.norm[k]))
            g = op.add(g, self.const(d.bias[k * u:(k + 1) * u]))
        return self.emit(g)

    def _step(self, pre, c, d: _Direction):
        from tvm import relax

        op = relax.op
        act = self.conv.convert_fused_activation_function
        k = 0 if d.cifg else 1  # where the forget gate's columns start
        f = self.emit(op.sigmoid(self._gate(pre, k, d, "f", c)))
        if d.cifg:
            i = self.emit(op.subtract(relax.const(1.0, "float32"), f))
        else:
            i = self.emit(op.sigmoid(self._gate(pre, 0, d, "i", c)))
        g = self.emit(act(self._gate(pre, k + 1, d, "", None), self.activation))
        c_new = op.multiply(i, g) if c is None else op.add(op.multiply(f, c), op.multiply(i, g))
        if self.cell_clip > 0:
            c_new = op.clip(c_new, -self.cell_clip, self.cell_clip)
        c_new = self.emit(c_new)
        o = self.emit(op.sigmoid(self._gate(pre, k + 2, d, "o", c_new)))
        h = self.emit(op.multiply(o, act(c_new, self.activation)))
        if d.proj is not None:
            weights, bias = d.proj
            h = op.matmul(h, self.const(weights))
            if bias is not None:
                h = op.add(h, self.const(bias))
            if self.proj_clip > 0:
                h = op.clip(h, -self.proj_clip, self.proj_clip)
            h = self.emit(h)
        return h, c_new
