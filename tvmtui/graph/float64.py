"""A float graph in float64: the exact reference a parity dispute is judged against.

Every float32 constant, parameter and cast becomes float64; TVM re-infers the rest. Built
untuned, it is slow, and only run on the frames in dispute."""

from __future__ import annotations


def as_float64(mod):
    """`mod` (a Relax module from `relax_import.load_relax`) computing in float64; its
    `main` takes and returns float64 where it took and returned float32."""
    from tvm import relax

    def widened(ty):
        if isinstance(ty, relax.TensorType) and ty.dtype == "float32":
            return relax.TensorType(ty.shape, "float64")
        return ty

    @relax.expr_functor.mutator
    class Widen(relax.PyExprMutator):
        def visit_generic_const_(self, const):
            value = const.value.numpy()
            if value.dtype.name != "float32":
                return const
            return relax.const(value.astype("float64"), "float64")

        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", "")
            if name == "relax.astype" and str(call.attrs.dtype) == "float32":
                return relax.op.astype(call.args[0], "float64")
            return call

    for gvar, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function):
            continue
        params = [relax.Var(p.name, widened(p.ty)) for p in func.params]
        mutator = Widen(mod)
        for old, new in zip(func.params, params):
            mutator.set_var_remap(old, new)
        body = mutator.visit_expr(func.body)
        mod[gvar] = relax.Function(params, body, attrs=func.attrs)
    return mod
