"""A private function's constant arguments bound into its body (rewrite revision 21).

TVM's TFLite frontend writes an IF or WHILE operator's branches as private Relax functions
and passes the model's weights to them as arguments. Inside a branch a weight is then a
parameter, not a constant: nothing folds its transpose, and a fully connected layer
transposed its weight at every call (openWakeWord's wake-word heads spent 89% of their
time there). Here a parameter that every call passes the same constant (or, in a
recursive function, the parameter itself) is read as that constant in the function's
body; repeated, so a constant reaches a branch through the function that calls it.
"""

from __future__ import annotations


def bind_constant_arguments(mod):
    """`mod` with the constant arguments of its private functions bound (a new module)."""
    import tvm

    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    done: set = set()  # (function name, parameter index) already bound
    while True:
        bound = {g: {i: c for i, c in found.items() if (g.name_hint, i) not in done}
                 for g, found in _constant_params(out).items()}
        bound = {g: found for g, found in bound.items() if found}
        if not bound:
            return out
        done |= {(g.name_hint, i) for g, found in bound.items() for i in found}
        out = _rebind(out, bound)


def _is_private(func) -> bool:
    attrs = func.attrs
    return attrs is None or "global_symbol" not in attrs


def _calls(mod) -> dict:
    """Each function's GlobalVar -> [(calling GlobalVar, call), ...], for the functions
    only ever called (one passed as a value could be called with anything)."""
    import tvm
    from tvm import relax

    found: dict = {}
    seen: dict = {}  # GlobalVar -> times it appears, called or not
    for caller, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue

        def visit(expr, caller=caller):
            if isinstance(expr, tvm.ir.GlobalVar):
                seen[expr] = seen.get(expr, 0) + 1
            elif isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.GlobalVar):
                found.setdefault(expr.op, []).append((caller, expr))

        relax.analysis.post_order_visit(func, visit)
    return {g: sites for g, sites in found.items() if seen.get(g, 0) == len(sites)}


def _constant_params(mod) -> dict:
    """Private function's GlobalVar -> {parameter index: the constant every call passes}."""
    import tvm
    from tvm import relax

    bound: dict = {}
    for gvar, sites in _calls(mod).items():
        func = mod.functions.get(gvar)
        if not isinstance(func, relax.Function) or not _is_private(func):
            continue
        indices: dict = {}
        for i, param in enumerate(func.params):
            value = None
            for caller, call in sites:
                arg = call.args[i]
                if caller.same_as(gvar) and arg.same_as(param):
                    continue  # a recursive call passing the parameter on
                if not isinstance(arg, tvm.ir.expr.GenericConst) or (
                        value is not None and not arg.same_as(value)):
                    value = None
                    break
                value = arg
            if value is not None:
                indices[i] = value
        if indices:
            bound[gvar] = indices
    return bound


def _rebind(mod, bound: dict):
    """`mod` with each parameter in `bound` read as its constant in its function's body
    (the parameter itself stays: the function's type, and so its calls, are unchanged)."""
    import tvm
    from tvm import relax

    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gvar, indices in bound.items():
        func = mod[gvar]
        body = _substituted(mod, func.body, {func.params[i]: c for i, c in indices.items()})
        out[gvar] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs,
                                   func.span)
    return out


def _substituted(mod, expr, constants: dict):
    """`expr` with each variable in `constants` replaced by its value."""
    from tvm import relax

    @relax.expr_functor.mutator
    class AsConstant(relax.PyExprMutator):
        def visit_var_(self, var):
            return constants.get(var, var)

    return AsConstant(mod).visit_expr(expr)
