"""Folding what is constant with numpy, in the result's dtype: elementwise arithmetic,
`where`, transposes, reshapes, and layout transforms through their index map (TVM's
FoldConstant would compile a kernel for each)."""

from __future__ import annotations

_BINARY = {"relax.add": "add", "relax.subtract": "subtract", "relax.multiply": "multiply",
           "relax.divide": "divide", "relax.power": "power", "relax.maximum": "maximum",
           "relax.minimum": "minimum"}
_UNARY = {"relax.sqrt": "sqrt", "relax.negative": "negative", "relax.exp": "exp",
          "relax.isnan": "isnan"}
_SAME_ELEMENTS = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten")


def constant_value(expr):
    """The numpy value of a Relax constant, else None."""
    import tvm

    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.GenericConst) else None


def _as_transpose(index_map, in_shape) -> tuple[list[int], list[int]] | None:
    """A blocking index map (each output index an input index `x`, `x // c` or `x % c`)
    as a reshape that splits the blocked dims then a transpose: (split shape, axes)."""
    from tvm import tirx

    names = [v.name for v in index_map.initial_indices]
    parts = []  # per output index: (input dim, "id" | "div" | "mod", block)
    for e in index_map.final_indices:
        if isinstance(e, tirx.Var) and e.name in names:
            parts.append((names.index(e.name), "id", 1))
        elif (isinstance(e, (tirx.FloorDiv, tirx.FloorMod)) and isinstance(e.a, tirx.Var)
              and e.a.name in names and isinstance(e.b, tirx.IntImm)):
            kind = "div" if isinstance(e, tirx.FloorDiv) else "mod"
            parts.append((names.index(e.a.name), kind, int(e.b.value)))
        else:
            return None
    used = [(d, k) for d, k, _ in parts]
    if len(used) != len(set(used)):  # an index used twice
        return None
    split: list = []
    axis: dict = {}
    for d, n in enumerate(in_shape):
        kinds = {k: b for dd, k, b in parts if dd == d}
        if set(kinds) == {"id"}:
            axis[(d, "id")] = len(split)
            split.append(n)
        elif set(kinds) == {"div", "mod"} and kinds["div"] == kinds["mod"] \
                and n % kinds["div"] == 0:
            axis[(d, "div")], axis[(d, "mod")] = len(split), len(split) + 1
            split += [n // kinds["div"], kinds["div"]]
        else:
            return None
    return split, [axis[(d, k)] for d, k, _ in parts]


def _apply_index_map(index_map, value, shape):
    """Move every element of `value` to where a (padding-free) index map sends it."""
    import numpy as np

    plan = _as_transpose(index_map, value.shape)
    if plan is not None and [plan[0][a] for a in plan[1]] == list(shape):
        split, axes = plan
        return np.ascontiguousarray(value.reshape(split).transpose(axes))
    return _scatter(index_map, value, shape)


def _scatter(index_map, value, shape):
    """`_apply_index_map` for any index map: element by element (slow on big weights)."""
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
    from tvm import relax

    @relax.expr_functor.mutator
    class Folder(relax.PyExprMutator):
        def constant(self, expr):
            if isinstance(expr, relax.Var):
                bound = self.lookup_binding(expr)
                expr = expr if bound is None else bound
            return constant_value(expr)

        def layout_transform(self, call):
            value = self.constant(call.args[0])
            if value is None or call.attrs.pad_value is not None:
                return call
            try:
                shape = [int(d) for d in call.ty.shape]
                moved = _apply_index_map(call.attrs.index_map, value, shape)
                return relax.const(moved, moved.dtype.name)  # int64 stays int64
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
            return relax.const(out, dtype) if list(out.shape) == shape else call

    folder = Folder(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            folder.builder_.update_func(gvar, folder.visit_expr(func))
    return relax.transform.CanonicalizeBindings()(folder.builder_.get())
