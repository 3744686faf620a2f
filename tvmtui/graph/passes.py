"""Running a Relax expression mutator over each function of a module."""

from __future__ import annotations


def each_function(mod, rewrite, prune: bool = True):
    """A new module: `mod` with each Relax function replaced by `rewrite(mod, func)` (and,
    with `prune`, its unused bindings removed). `mod` itself is left as it is: a variant's
    rewrite must not change the graph the other variants start from."""
    import tvm
    from tvm import relax

    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            new = rewrite(mod, func)
            out[gvar] = relax.analysis.remove_all_unused(new) if prune else new
    return out


def each_call(mod, rewrite, prune: bool = True):
    """`each_function` with every call, its arguments rewritten first, replaced by
    `rewrite(call, lookup, emit)`: `lookup` gives a variable's bound value, `emit` binds a
    new expression to a fresh variable."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            return rewrite(call, self.lookup_binding, self.builder_.emit)

    return each_function(mod, lambda m, func: Rewrite(m).visit_expr(func), prune)


def use_counts(func) -> dict:
    """How many times each var of `func` is read (by handle)."""
    from tvm import relax

    counts: dict = {}

    def visit(expr):
        if isinstance(expr, relax.Var):
            counts[expr] = counts.get(expr, 0) + 1

    for block in func.body.blocks:
        for binding in block.bindings:
            relax.analysis.post_order_visit(binding.value, visit)
    relax.analysis.post_order_visit(func.body.body, visit)
    return counts
