"""Sigmoid, tanh, exp and erf in float32 as TVM's polynomial forms, which vectorize.

TVM lowers `exp` and `tanh` on CPUs to LLVM's intrinsics, and LLVM with no vector math
library turns a vector of them into one libm call per lane: an LSTM cell's gates (three
sigmoids and two tanhs over 128 values) took 1.5 us, at ~11 ns a value, where LiteRT's
vectorized kernels take a fraction of that. TOPI's `fast_exp` / `fast_tanh` / `fast_erf`
are range reductions plus polynomials, plain arithmetic that vectorizes: the same gates in
0.54 us. Over [-30, 30] fast_exp is within 1.5e-7 of exp (relative), fast_tanh 2.7e-7 of
tanh and fast_erf 3.2e-7 of erf (the parity gate allows 1e-4). From rewrite revision 6
every variant legalizes these operators so. From revision 25 a float32 softmax is computed
with the same exp: TOPI's softmax called libm's per value (YOLOv8's box decoding, a
softmax over 16 bins of 8400 values, took 0.4 ms of NudeNet's 6).
"""

from __future__ import annotations


def _float32(call) -> bool:
    return getattr(call.args[0].ty, "dtype", None) == "float32"


def _sigmoid(x):
    from tvm import te, topi

    e = topi.fast_exp(topi.negative(x))
    return te.compute(x.shape, lambda *i: 1.0 / (1.0 + e(*i)), name="fast_sigmoid")


def _softmax(x, axis: int):
    from tvm import topi

    top = topi.max(x, axis=axis, keepdims=True)
    e = topi.fast_exp(topi.subtract(x, top))
    return topi.divide(e, topi.sum(e, axis=axis, keepdims=True))


def legalizations(softmax: bool = False) -> dict:
    """LegalizeOps entries for the operators above (other dtypes keep the stock ones);
    `softmax`: float32 softmax too (revision 25)."""
    from tvm import topi

    forms = {"relax.sigmoid": _sigmoid, "relax.tanh": topi.fast_tanh,
             "relax.exp": topi.fast_exp, "relax.erf": topi.fast_erf}

    def legalize(op_name, fast):
        def apply(bb, call):
            if _float32(call):
                return bb.call_te(fast, call.args[0], primfunc_name_hint=op_name.split(".")[-1])
            return _stock(op_name)(bb, call)

        return apply

    out = {name: legalize(name, fast) for name, fast in forms.items()}
    if softmax:
        def apply_softmax(bb, call):
            if _float32(call):
                return bb.call_te(_softmax, call.args[0], int(call.attrs.axis),
                                  primfunc_name_hint="softmax")
            return _stock("relax.nn.softmax")(bb, call)

        out["relax.nn.softmax"] = apply_softmax
    return out


def _stock(op_name: str):
    """The legalization TVM registers for `op_name`."""
    import tvm

    return tvm.ir.Op.get(op_name).get_attr("FLegalize")
