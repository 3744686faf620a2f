"""Per-channel affine operators after a convolution, folded into its weights (rewrite
revision 9).

An imported BatchNormalization reaches Relax as `(y - mean) / sqrt(var + eps) * gamma +
beta` on the convolution's output `y`, four operators whose operands are per-channel
constants. Left in the graph they become the fused kernel's epilogue: four more loads and
a division for every output element, which on a depthwise layer (9 multiply-adds an
output) costs about as much as the convolution. Folded, the layer is `conv(x, W * s) + t`
with `s` and `t` per output channel: what ONNX Runtime, LiteRT and OpenVINO run. The
folded weights differ from the separate operators by float32 rounding only (~1e-7
relative), far inside the parity gate.

A chain is folded only while each intermediate result has no other user, so nothing is
computed twice; `add`, `subtract`, `multiply` and `divide` by a constant that varies along
the output channels alone (or not at all) are folded, anything else ends the chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tvmtui.graph.fold import constant_value

_CONVS = ("relax.nn.conv2d", "relax.nn.conv2d_transpose")
_STEPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


@dataclass
class _Chain:
    """A convolution's output times `scale` plus `shift`, per output channel."""

    call: object  # the convolution's Relax call
    weight: np.ndarray
    axis: int  # the output-channel axis of the convolution's result
    scale: np.ndarray
    shift: np.ndarray
    members: list = field(default_factory=list)  # the bound vars, convolution first




def _start(call, var) -> _Chain | None:
    """A chain from a float32 convolution with constant weights in a plain layout."""
    weight = constant_value(call.args[1])
    attrs = call.attrs
    out_layout = str(attrs.out_layout or attrs.data_layout)
    kernel_layout = str(attrs.kernel_layout)
    dtype = getattr(var.ty, "dtype", None)
    if weight is None or weight.dtype != np.float32 or dtype != "float32" or \
            len(out_layout) != 4 or "C" not in out_layout or "O" not in kernel_layout:
        return None
    shape = [int(d) for d in var.ty.shape]
    axis, o_axis = out_layout.index("C"), kernel_layout.index("O")
    channels = shape[axis]
    if weight.shape[o_axis] != channels:  # a grouped transposed convolution
        return None
    ones = np.ones(channels)
    return _Chain(call, np.moveaxis(weight, o_axis, 0), axis, ones, np.zeros(channels), [var])


def _per_channel(value: np.ndarray, rank: int, axis: int, channels: int) -> np.ndarray | None:
    """`value` as one number per channel, when it broadcasts along `axis` alone."""
    if value.dtype != np.float32 or value.ndim > rank:
        return None
    shape = (1,) * (rank - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(shape[axis]), (channels,)).astype(np.float64)


def _extend(chain: _Chain, op: str, lhs: bool, c: np.ndarray) -> bool:
    """Apply `y op c` (`c op y` when not `lhs`) to the chain; False when it is not affine."""
    if op == "relax.add":
        chain.shift = chain.shift + c
    elif op == "relax.subtract":
        chain.scale, chain.shift = (chain.scale, chain.shift - c) if lhs else \
            (-chain.scale, c - chain.shift)
    elif op == "relax.multiply":
        chain.scale, chain.shift = chain.scale * c, chain.shift * c
    elif lhs and np.all(c != 0):  # divide
        chain.scale, chain.shift = chain.scale / c, chain.shift / c
    else:
        return False
    return True


def _use_counts(func) -> dict:
    from tvm import relax

    uses: dict = {}
    exprs = [b.value for block in func.body.blocks for b in block.bindings] + [func.body.body]
    for expr in exprs:
        for var in relax.analysis.free_vars(expr):
            uses[var] = uses.get(var, 0) + 1
    return uses


def _chains(func) -> list[_Chain]:
    """The foldable chains of `func`, each with at least one operator after its convolution."""
    from tvm import relax

    uses = _use_counts(func)
    open_chains: dict = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(binding, relax.VarBinding) or not isinstance(value, relax.Call):
                continue
            name = getattr(value.op, "name", None)
            if name in _CONVS:
                chain = _start(value, binding.var)
                if chain is not None:
                    open_chains[binding.var] = chain
                continue
            if name not in _STEPS or len(value.args) != 2:
                continue
            lhs = value.args[0] in open_chains
            src, other = value.args if lhs else value.args[::-1]
            chain = open_chains.get(src)
            if chain is None or uses.get(src, 0) != 1 or not isinstance(src, relax.DataflowVar):
                continue
            const = constant_value(other)
            rank = len(binding.var.ty.shape)
            c = None if const is None else _per_channel(const, rank, chain.axis, len(chain.scale))
            if c is None or not _extend(chain, name, lhs, c):
                continue
            del open_chains[src]
            chain.members.append(binding.var)
            open_chains[binding.var] = chain
    return [c for c in open_chains.values() if len(c.members) > 1]


def fold_channel_affine(mod):
    """`mod` with every convolution's per-channel affine chain folded into its weights and
    one bias add."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Folder(relax.PyExprMutator):
        def __init__(self, mod, tails: dict, absorbed: set):
            super().__init__(mod)
            self.tails, self.absorbed = tails, absorbed

        def visit_var_binding_(self, binding):
            if binding.var in self.absorbed:
                return  # its one user, further down the chain, takes its place
            chain = self.tails.get(binding.var)
            if chain is None:
                return super().visit_var_binding_(binding)
            call = chain.call
            weight = chain.weight * chain.scale.reshape((-1,) + (1,) * (chain.weight.ndim - 1))
            o_axis = str(call.attrs.kernel_layout).index("O")
            weight = relax.const(np.moveaxis(weight, 0, o_axis).astype(np.float32))
            conv = relax.Call(call.op, [self.visit_expr(call.args[0]), weight], call.attrs)
            value = conv
            if np.any(chain.shift != 0):
                shape = [1] * len(binding.var.ty.shape)
                shape[chain.axis] = len(chain.shift)
                bias = relax.const(chain.shift.astype(np.float32).reshape(shape))
                value = relax.op.add(self.builder_.emit(conv), bias)
            self.builder_.emit_normalized(
                relax.VarBinding(binding.var, self.builder_.normalize(value)))

    chains = [c for func in mod.functions.values()
              if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr)
              for c in _chains(func)]
    if not chains:
        return mod
    folder = Folder(mod, {c.members[-1]: c for c in chains},
                    {v for c in chains for v in c.members[:-1]})
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            folder.builder_.update_func(gvar, folder.visit_expr(func))
    return relax.transform.CanonicalizeBindings()(folder.builder_.get())
