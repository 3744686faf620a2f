"""ONNX and TFLite bytes -> Relax IRModule in inference form (weights bound as constants)."""

from __future__ import annotations


def model_to_relax(fmt: str, model_bytes: bytes, input_shapes: dict[str, list[int]]):
    """A session's model (ONNX or TFLite bytes) -> Relax IRModule in inference form."""
    if fmt == "tflite":
        return tflite_to_relax(model_bytes, input_shapes)
    return onnx_to_relax(model_bytes, input_shapes)


def tflite_to_relax(model_bytes: bytes, input_shapes: dict[str, list[int]]):
    """TFLite bytes -> Relax (sparse and float16 weights made plain first), with the layout
    fix TRANSPOSE_CONV needs to build."""
    import tflite
    import tvm
    from tvm import relax
    from tvm.relax.frontend.tflite import from_tflite

    from tvmtui.graph.normalize import normalize_tflite

    model = tflite.Model.GetRootAsModel(normalize_tflite(model_bytes), 0)
    mod = from_tflite(model, shape_dict={k: tuple(v) for k, v in input_shapes.items()},
                      op_converter=_tflite_converter())
    return tvm.transform.Sequential(
        [
            relax.transform.ConvertLayout({"relax.nn.conv2d_transpose": ["NCHW", "IOHW"]}),
            relax.transform.DecomposeOpsForInference(),
            relax.transform.CanonicalizeBindings(),
        ]
    )(mod)


def _tflite_converter():
    """TVM's TFLite operator converter with its defects met so far fixed (README: "TVM
    frontend defects")."""
    import numpy as np
    from tvm import relax
    from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter

    class Converter(OperatorConverter):
        def get_expr(self, input_tensor_idx):
            # Stock BATCH_MATMUL (and others) look a constant operand up as a computed
            # value (KeyError): make the constant instead.
            if input_tensor_idx >= 0 and not self.has_expr(input_tensor_idx):
                return self.get_tensor_expr(self.get_tensors([input_tensor_idx])[0])
            return super().get_expr(input_tensor_idx)

        def convert_expand_dims(self, op):
            # Stock passes a third argument relax.op.expand_dims does not take.
            data, axis = self.get_input_tensors(op)
            axis = int(np.asarray(self.get_tensor_value(axis)).flat[0])
            return relax.op.expand_dims(self.get_tensor_expr(data), axis)

    return Converter


def onnx_to_relax(model_bytes: bytes, input_shapes: dict[str, list[int]]):
    """ONNX bytes -> Relax IRModule with weights bound as constants, inference form (shape
    and constant subgraphs folded first)."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from tvmtui.graph.normalize import fold_onnx

    model = onnx.load_from_string(fold_onnx(model_bytes))
    mod = from_onnx(model, shape_dict=input_shapes, keep_params_in_input=False)
    return tvm.transform.Sequential(
        [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
    )(mod)


def load_relax(fmt: str, model_bytes: bytes, input_shapes: dict[str, list[int]]):
    """The graph every variant starts from: imported, with constant subgraphs folded once
    (BatchNorm statistics, weight transposes), so variants see plain constant weights."""
    from tvm import relax

    mod = model_to_relax(fmt, model_bytes, input_shapes)
    # Stock FoldConstant compiles a kernel for every folded operator (12 s for MobileNet's
    # BatchNorm statistics); numpy folds the common ones first, to the same constants.
    return relax.transform.FoldConstant()(fold_with_numpy(mod))


_BINARY = {"relax.add": "add", "relax.subtract": "subtract", "relax.multiply": "multiply",
           "relax.divide": "divide", "relax.power": "power", "relax.maximum": "maximum",
           "relax.minimum": "minimum"}
_UNARY = {"relax.sqrt": "sqrt", "relax.negative": "negative", "relax.exp": "exp",
          "relax.isnan": "isnan"}
_SAME_ELEMENTS = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten")


def _apply_index_map(index_map, value, shape):
    """Move every element of `value` to where a (padding-free) index map sends it."""
    import numpy as np
    from tvm import tirx

    grids = np.indices(value.shape, sparse=True)
    env = dict(zip((v.name for v in index_map.initial_indices), grids))

    def ev(e):
        if isinstance(e, tirx.Var):
            return env[e.name]
        if isinstance(e, tirx.IntImm):
            return int(e.value)
        ops = {tirx.FloorDiv: np.floor_divide, tirx.FloorMod: np.mod, tirx.Add: np.add,
               tirx.Sub: np.subtract, tirx.Mul: np.multiply}
        for kind, fn in ops.items():
            if isinstance(e, kind):
                return fn(ev(e.a), ev(e.b))
        raise NotImplementedError(type(e).__name__)

    dst = np.broadcast_arrays(*[ev(e) for e in index_map.final_indices])
    out = np.zeros(shape, value.dtype)
    if out.size != value.size:
        raise ValueError("the index map pads or drops elements")
    out[tuple(dst)] = value
    return out


def fold_with_numpy(mod):
    """Fold operators whose inputs are all constants with numpy (elementwise arithmetic,
    where, transposes, reshapes; layout transforms through their index map), in the
    result's dtype; others are left as they are."""
    import numpy as np
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class Folder(relax.PyExprMutator):
        def constant(self, expr):
            if isinstance(expr, relax.Var):
                bound = self.lookup_binding(expr)
                expr = expr if bound is None else bound
            return expr.value.numpy() if isinstance(expr, tvm.ir.expr.GenericConst) else None

        def layout_transform(self, call):
            value = self.constant(call.args[0])
            if value is None or call.attrs.pad_value is not None:
                return call
            try:
                shape = [int(d) for d in call.ty.shape]
                return relax.const(_apply_index_map(call.attrs.index_map, value, shape))
            except (NotImplementedError, TypeError, ValueError, IndexError):
                return call

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            name = getattr(call.op, "name", None)
            if name == "relax.layout_transform":  # e.g. weights packed by ConvertLayout
                return self.layout_transform(call)
            if name not in _BINARY and name not in _UNARY and name != "relax.where" and \
                    name not in _SAME_ELEMENTS and name != "relax.permute_dims":
                return call
            n = 1 if name in _SAME_ELEMENTS or name == "relax.permute_dims" else None
            args = [self.constant(a) for a in call.args[:n]]
            if not args or any(a is None for a in args):
                return call
            try:
                shape = [int(d) for d in call.ty.shape]
                dtype = str(call.ty.dtype)
            except (TypeError, ValueError, AttributeError):
                return call
            if name in _SAME_ELEMENTS:
                out = args[0].reshape(shape)
            elif name == "relax.permute_dims":
                axes = call.attrs.axes
                out = np.transpose(args[0], None if axes is None else [int(a) for a in axes])
            elif name == "relax.where":
                out = np.where(*args)
            else:
                out = getattr(np, _BINARY.get(name) or _UNARY[name])(*args)
            out = np.asarray(out, dtype=dtype)
            return relax.const(out) if list(out.shape) == shape else call

    folder = Folder(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            folder.builder_.update_func(gvar, folder.visit_expr(func))
    return relax.transform.CanonicalizeBindings()(folder.builder_.get())


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
    tb = exc.__traceback__.tb_next  # from the frame below the (still running) caller's
    while tb is not None:
        local = tb.tb_frame.f_locals
        node, op_code, op_idx = local.get("node"), local.get("op_code_str"), local.get("op_idx")
        if hasattr(node, "op_type") and hasattr(node, "name"):
            found = f"{node.op_type} (node {node.name or '?'})"
        elif isinstance(op_code, str) and isinstance(op_idx, int):
            found = f"{op_code} (operator #{op_idx})"
        tb = tb.tb_next
    return found
