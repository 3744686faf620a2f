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
