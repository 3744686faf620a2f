"""ONNX and TFLite bytes -> Relax IRModule in inference form (weights bound as constants)."""

from __future__ import annotations

import threading
from typing import Any

from tvmtui.graph.fold import fold_with_numpy
from tvmtui.graph.variants import REWRITE_REVISION

_ONNX_IMPORT = threading.Lock()  # the converter table is swapped during an import


def model_to_relax(fmt: str, model_bytes: bytes, input_shapes: dict[str, list[int]],
                   revision: int = REWRITE_REVISION):
    """A session's model (ONNX or TFLite bytes) -> Relax IRModule in inference form;
    `revision` as in `variants.REWRITE_REVISION` (from 2, clips are Relax max/min; from 14,
    quantized TFLite layers compute in integers, `integer.py`, and the module's attribute
    `INTEGER_ATTR` says which; 15 rounds their fully connected layers as LiteRT does; 24
    writes a float PRELU as elementwise operators, `tflite_converter`)."""
    if fmt == "tflite":
        mod = tflite_to_relax(model_bytes, input_shapes, revision)
        if revision >= 14:
            from tvmtui.graph.integer import INTEGER_ATTR, lower_integer

            mod, plan = lower_integer(mod, revision)
            if plan.count() or plan.left:
                mod = mod.with_attr(INTEGER_ATTR, plan.to_text())
        return clip_as_max_min(mod, integers=revision >= 14) if revision >= 2 else mod
    return onnx_to_relax(model_bytes, input_shapes, revision)


def clip_as_max_min(mod, integers: bool = False):
    """Each float `relax.clip` (with `integers`, every one: a quantized layer's fused
    activation) as maximum then minimum against 0-d constants: ConvertLayout carries a
    blocked layout through those, not through clip (TFLite's fused RELU6)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class ClipRewriter(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", None) != "relax.clip":
                return call
            dtype = str(call.args[0].ty.dtype)
            if not dtype.startswith("float") and not integers:
                return call
            lo, hi = (float(arg.value) for arg in call.args[1:3])
            if not dtype.startswith("float"):
                lo, hi = int(lo), int(hi)
            out = relax.op.maximum(call.args[0], relax.const(lo, dtype))
            return relax.op.minimum(out, relax.const(hi, dtype))

    for gvar, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gvar] = ClipRewriter().visit_expr(func)
    return mod


def _onnx_clip():
    """ONNX Clip as Relax maximum/minimum. The stock converter emits TE calls (call_tir),
    which ConvertLayout cannot carry a blocked layout through: MobileNet's NCHW8c graph
    kept 54 layout transforms around its ReLU6s."""
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as f

    class Clip(f.Clip):
        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            out, dtype = inputs[0], inputs[0].ty.dtype
            if "min" in attr:
                out = bb.emit(relax.op.maximum(out, relax.const(float(attr["min"]), dtype)))
            if "max" in attr:
                out = bb.emit(relax.op.minimum(out, relax.const(float(attr["max"]), dtype)))
            return out

        @classmethod
        def _impl_v13(cls, bb, inputs, attr, params):
            out = inputs[0]
            if inputs[1] is not None:
                out = bb.emit(relax.op.maximum(out, cls._bound(bb, inputs[1], True)))
            if inputs[2] is not None:
                out = bb.emit(relax.op.minimum(out, cls._bound(bb, inputs[2], False)))
            return out

        @classmethod
        def _bound(cls, bb, bound, for_min: bool):
            """A one-element constant bound as a 0-d one (a shape-(1,) operand stops the
            layout as much as a TE call does); others as the stock converter has them."""
            value: Any = getattr(bound, "value", None)
            if hasattr(value, "numpy") and value.numpy().size == 1:
                number = float(value.numpy().reshape(()))
                if number == number:  # NaN: unbounded, as the stock converter treats it
                    return relax.const(number, value.numpy().dtype.name)
            return cls._sanitize_nan_clip_bound(bb, bound, for_min=for_min)

    return Clip


def tflite_to_relax(model_bytes: bytes, input_shapes: dict[str, list[int]],
                    revision: int = REWRITE_REVISION):
    """TFLite bytes -> Relax (sparse and float16 weights made plain first), with the layout
    fix TRANSPOSE_CONV needs to build."""
    import tflite
    import tvm
    from tvm import relax
    from tvm.relax.frontend.tflite import from_tflite

    from tvmtui.graph.normalize import normalize_tflite

    model = tflite.Model.GetRootAsModel(normalize_tflite(model_bytes), 0)
    mod = from_tflite(model, shape_dict={k: tuple(v) for k, v in input_shapes.items()},
                      op_converter=tflite_converter(revision))
    return tvm.transform.Sequential(
        [
            relax.transform.ConvertLayout({"relax.nn.conv2d_transpose": ["NCHW", "IOHW"]}),
            relax.transform.DecomposeOpsForInference(),
            relax.transform.CanonicalizeBindings(),
        ]
    )(mod)


def tflite_converter(revision: int = REWRITE_REVISION):
    """TVM's TFLite operator converter with its defects met so far fixed (README: "TVM
    frontend defects"); from `revision` 24 a float PRELU is elementwise operators."""
    import numpy as np
    from tvm import relax
    from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter

    from tvmtui.graph.recurrent_tflite import sequence_lstm
    from tvmtui.graph.simplify import elementwise_prelu

    class Converter(OperatorConverter):
        # Stock refuses int8 PAD and TRANSPOSE although its converters are right for them
        # (PAD pads with the input's zero point; TRANSPOSE moves integers): the TFLite
        # converter writes both into int8 MobileNets.
        _SUPPORTED_QUANTIZED_OPS = OperatorConverter._SUPPORTED_QUANTIZED_OPS | {
            "PAD", "PADV2", "TRANSPOSE"}

        def get_expr(self, input_tensor_idx):
            # Stock BATCH_MATMUL (and others) look a constant operand up as a computed
            # value (KeyError): make the constant instead.
            if input_tensor_idx >= 0 and not self.has_expr(input_tensor_idx):
                return self.get_tensor_expr(self.get_tensors([input_tensor_idx])[0])
            return super().get_expr(input_tensor_idx)

        def convert_unidirectional_sequence_lstm(self, op):
            # Stock takes only the coupled-gate form (a Keras LSTM has an input gate).
            return sequence_lstm(self, op, bidirectional=False)

        def convert_bidirectional_sequence_lstm(self, op):
            return sequence_lstm(self, op, bidirectional=True)

        def convert_batch_matmul(self, op):
            # Stock reads operand shapes from `expr.ty`, which has none ("'Type' object has
            # no attribute 'shape'"): every BATCH_MATMUL failed. relax.op.matmul broadcasts
            # batch dimensions as TFLite does; adj_x / adj_y swap the last two axes.
            from tflite.BatchMatMulOptions import BatchMatMulOptions

            if self.is_quantized(op):
                raise NotImplementedError("quantized BATCH_MATMUL")
            options = BatchMatMulOptions()
            raw = op.BuiltinOptions()
            options.Init(raw.Bytes, raw.Pos)
            operands = []
            for tensor, adjoint in zip(self.get_input_tensors(op),
                                       (options.AdjX(), options.AdjY()), strict=True):
                expr = self.get_expr(tensor.tensor_idx)
                if adjoint:
                    rank = tensor.tensor.ShapeLength()
                    expr = relax.op.permute_dims(
                        expr, [*range(rank - 2), rank - 1, rank - 2])
                operands.append(expr)
            return relax.op.matmul(*operands)

        def convert_prelu(self, op):
            # Stock flattens the input and broadcasts alpha to its full size (a constant as
            # large as the activation), and the reshapes around the flat PReLU keep it out
            # of the convolution before it: a kernel and two passes over memory of its own
            # (15% of face_landmark's time). max(x, 0) + alpha * min(x, 0) is exact and
            # fuses into the convolution's epilogue.
            if revision < 24 or self.is_quantized(op):
                return super().convert_prelu(op)
            data, alpha = self.get_input_tensors(op)
            x = self.bb.normalize(self.get_tensor_expr(data))
            out = elementwise_prelu(x, self.get_tensor_expr(alpha))
            return super().convert_prelu(op) if out is None else out  # not a float input

        def convert_expand_dims(self, op):
            # Stock passes a third argument relax.op.expand_dims does not take.
            data, axis = self.get_input_tensors(op)
            axis = int(np.asarray(self.get_tensor_value(axis)).flat[0])
            return relax.op.expand_dims(self.get_tensor_expr(data), axis)

    return Converter


def onnx_to_relax(model_bytes: bytes, input_shapes: dict[str, list[int]],
                  revision: int = REWRITE_REVISION):
    """ONNX bytes -> Relax IRModule with weights bound as constants, inference form (shape
    and constant subgraphs folded first, recurrent nodes written out step by step)."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.relax.frontend.onnx import onnx_frontend as frontend

    from tvmtui.graph.normalize import fold_onnx
    from tvmtui.graph.recurrent import expand_recurrent

    model = expand_recurrent(onnx.load_from_string(fold_onnx(model_bytes)))
    with _ONNX_IMPORT:
        stock = frontend._get_convert_map
        if revision >= 2:
            clip = _onnx_clip()
            frontend._get_convert_map = lambda: dict(stock(), Clip=clip)
        try:
            mod = from_onnx(model, shape_dict=input_shapes, keep_params_in_input=False)
        finally:
            frontend._get_convert_map = stock
    return tvm.transform.Sequential(
        [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
    )(mod)


def load_relax(fmt: str, model_bytes: bytes, input_shapes: dict[str, list[int]],
               revision: int = REWRITE_REVISION):
    """The graph every variant starts from: imported, with constant subgraphs folded once
    (BatchNorm statistics, weight transposes), so variants see plain constant weights; from
    revision 21 that holds inside an IF or WHILE's branches too (`calls.py`)."""
    from tvm import relax

    mod = model_to_relax(fmt, model_bytes, input_shapes, revision)
    if revision >= 21:
        from tvmtui.graph.calls import bind_constant_arguments

        mod = bind_constant_arguments(mod)
    # Stock FoldConstant compiles a kernel for every folded operator (12 s for MobileNet's
    # BatchNorm statistics); numpy folds the common ones first, to the same constants.
    return relax.transform.FoldConstant()(fold_with_numpy(mod))


def import_problem(fmt: str, model_bytes: bytes, input_shapes: dict[str, list[int]]) -> str | None:
    """Why TVM cannot import this model (one line naming the operator and its node), or
    None when it imports; run before a session exists."""
    problem = None
    with _quiet():  # the ONNX frontend prints the failing node's inputs, TVM warns on stderr
        try:
            load_relax(fmt, model_bytes, input_shapes)
        except Exception as exc:  # noqa: BLE001 - any importer failure is the user's message
            lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
            last = next((ln for ln in reversed(lines) if not ln.startswith("#")), "")
            reason = f"{type(exc).__name__}: {last[:200]}" if last else type(exc).__name__
            where = _failing_node(exc)
            exc.__traceback__ = None  # frees the frontend's builder while stderr is quiet
            problem = (f"TVM's {fmt.upper()} importer failed: {reason}" if where is None else
                       f"TVM's {fmt.upper()} importer cannot convert {where}: {reason}")
            del exc
    return problem


class _quiet:
    """Discard what is written to stdout and stderr (file descriptors 1 and 2) inside."""

    def __enter__(self):
        import os
        import sys
        import tempfile

        sys.stdout.flush()
        sys.stderr.flush()
        self.sink = tempfile.TemporaryFile()
        self.saved = [os.dup(1), os.dup(2)]
        os.dup2(self.sink.fileno(), 1)
        os.dup2(self.sink.fileno(), 2)
        return self

    def __exit__(self, *exc_info):
        import gc
        import os
        import sys

        gc.collect()  # builders the failed import left behind warn when they are freed
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)
        self.sink.close()
        return False


def _failing_node(exc: BaseException) -> str | None:
    """The operator the frontend was converting when it raised, read off its frames:
    `Reshape (node name)` for ONNX, `CONV_2D (operator #i)` for TFLite."""
    found = None
    tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # below the caller's frame
    while tb is not None:
        local = tb.tb_frame.f_locals
        node: Any = local.get("node")
        op_code, op_idx = local.get("op_code_str"), local.get("op_idx")
        if hasattr(node, "op_type") and hasattr(node, "name"):
            found = f"{node.op_type} (node {node.name or '?'})"
        elif isinstance(op_code, str) and isinstance(op_idx, int):
            found = f"{op_code} (operator #{op_idx})"
        tb = tb.tb_next
    return found
