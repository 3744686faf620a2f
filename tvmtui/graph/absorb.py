"""Layout transforms absorbed into the kernel next to them (rewrite revision 11).

A channel-blocked graph keeps a layout transform wherever it meets NCHW: at its input, at
its output, before a flatten. FuseOps leaves each one a kernel of its own, as it never
fuses an injective operator into the convolution that reads it. Each costs a parallel
launch and a pass over memory: D9's blocked depthwise kernel ran 0.006 ms between two
transforms of 0.006 ms each. This pass, run between FuseOps and FuseTIR, merges a kernel
that only moves data and holds a layout transform (a flatten may follow it) into its one
neighbour that holds a convolution or a matrix product: into the kernel that reads its
output, else into the kernel whose output is its only input (as an epilogue). Within the
kernel, MetaSchedule samples where the transform runs, as for any block it does not
inline by rule: inlined into the loads that read it, at a loop of the consumer, or alone
first; the search measures which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvmtui.graph.passes import use_counts

INJECTIVE = 2  # TVM's OpPatternKind: elementwise 0, broadcast 1, injective 2
OUT_ELEMWISE_FUSABLE = 4  # a convolution or a matrix product
OPAQUE = 8
TRANSFORM = "te_layout_transform"  # the TIR function a Relax layout_transform becomes


@dataclass
class _Step:
    """One call_tir of a binding: its output var and call, its arguments either vars of
    `main` or outputs of earlier steps of the same binding."""

    var: Any  # relax.Var
    call: Any  # relax.Call of call_tir
    fields: list


@dataclass
class _Kernel:
    """A binding of `main` that runs TIR: a call_tir, or a call of a fused function."""

    binding: Any  # relax.VarBinding
    steps: list[_Step]
    output: Any  # the step output (or `main` var) that the binding returns
    args: list  # the `main` expressions it reads
    pattern: int  # the highest op_pattern of its TIR functions
    name: str


def _kernel(mod, binding, call_tir) -> _Kernel | None:
    from tvm import relax

    call = binding.value
    if not isinstance(call, relax.Call):
        return None
    if call.op.same_as(call_tir):
        fields = list(call.args[1].fields)
        steps = [_Step(binding.var, call, fields)]
        output, name = binding.var, call.args[0].name_hint
    elif isinstance(call.op, relax.GlobalVar):
        func = mod[call.op]
        if not (isinstance(func, relax.Function) and func.attrs is not None
                and int(func.attrs.get("Primitive", 0)) == 1
                and isinstance(func.body.body, relax.Var)):
            return None
        outer = dict(zip(func.params, call.args))
        steps = []
        for block in func.body.blocks:
            for inner in block.bindings:
                value = inner.value
                if not (isinstance(value, relax.Call) and value.op.same_as(call_tir)):
                    return None
                steps.append(_Step(inner.var, value,
                                   [outer.get(a, a) for a in value.args[1].fields]))
        output, name = func.body.body, call.op.name_hint.removeprefix("fused_")
    else:
        return None
    args = [a for step in steps for a in step.fields
            if not any(a.same_as(s.var) for s in steps)]
    funcs = [mod[s.call.args[0]] for s in steps]
    pattern = max(int((f.attrs or {}).get("op_pattern", 8)) for f in funcs)
    if pattern <= INJECTIVE and not (
            any(s.call.args[0].name_hint.startswith(TRANSFORM) for s in steps)
            and all(_moves_data(f) for f in funcs)):
        # Not a layout transform: a concatenation before an LSTM's matrix product, say,
        # stays apart, or each time step's product would be a task of its own.
        pattern = OPAQUE
    return _Kernel(binding, steps, output, args, pattern, name)


def _moves_data(func) -> bool:
    """Whether each block of `func` (a PrimFunc) only copies an element: a layout
    transform, a reshape, a transpose, a pad."""
    import tvm
    from tvm import s_tir, tirx

    sch = s_tir.Schedule(func)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        store = sch.get(block).body
        if not isinstance(store, tirx.BufferStore):
            return False
        value = store.value
        if isinstance(value, tvm.ir.Call) and value.op.name.endswith("if_then_else"):
            value = value.args[1]
        elif isinstance(value, tirx.Select):
            value = value.true_value
        if not isinstance(value, tvm.ir.TensorLoad):
            return False
    return True


def _merged(members: list[_Kernel]):
    """One Primitive function running `members` (producers first) -> (function, the
    `main` expressions to call it with)."""
    from tvm import relax

    outer: list = []  # `main` expressions read, in order
    params: list = []  # the merged function's parameter for each
    env: dict = {}  # step var -> what the merged function computes it as

    def lookup(expr):
        for var, new in env.items():
            if var.same_as(expr):
                return new
        for i, known in enumerate(outer):
            if known.same_as(expr):
                return params[i]
        outer.append(expr)
        params.append(relax.Var(f"p{len(params)}", expr.ty))
        return params[-1]

    for member in members:  # parameters in the order the members read them
        for arg in member.args:
            if not any(arg.same_as(m.binding.var) for m in members):
                lookup(arg)
    bb = relax.BlockBuilder()
    with bb.function("merged", params, attrs={"Primitive": 1}, private=True):
        with bb.dataflow():
            for member in members:
                for step in member.steps:
                    call = step.call
                    env[step.var] = bb.emit(relax.Call(
                        call.op, [call.args[0], relax.Tuple([lookup(f) for f in step.fields]),
                                  *call.args[2:]], call.attrs, call.ty_args))
                env[member.binding.var] = lookup(member.output)
            out = bb.emit_output(lookup(members[-1].binding.var))
        bb.emit_func_output(out)
    return bb.get()["merged"], outer


def absorb_layout_transforms(mod):
    """`mod` (after FuseOps) with each injective kernel whose output has one reader merged
    into a convolution or matrix-product kernel next to it; run FuseTIR next."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    main = mod["main"]
    uses = use_counts(main)
    builder = relax.BlockBuilder(mod)
    new_blocks, merged_any = [], False
    for block in main.body.blocks:
        if not isinstance(block, relax.DataflowBlock):
            new_blocks.append(block)
            continue
        kernels = [_kernel(mod, b, call_tir) for b in block.bindings]
        group_of: dict[int, list[int]] = {}  # binding index -> those its group absorbs
        into: dict[int, int] = {}  # absorbed binding index -> index of its group's end
        for i, kernel in enumerate(kernels):
            if kernel is None or kernel.pattern > INJECTIVE or i in into:
                continue
            single = (isinstance(kernel.binding.var, relax.DataflowVar)
                      and uses.get(kernel.binding.var, 0) == 1)
            reader = next((j for j in range(i + 1, len(kernels)) if kernels[j] is not None
                           and any(a.same_as(kernel.binding.var) for a in kernels[j].args)),
                          None)
            if single and reader is not None and kernels[reader].pattern == OUT_ELEMWISE_FUSABLE:
                into[i] = reader
                continue
            sources = [a for a in kernel.args if isinstance(a, relax.Var)]
            if len(sources) != 1 or not isinstance(sources[0], relax.DataflowVar):
                continue
            producer = next((j for j, k in enumerate(kernels[:i]) if k is not None
                             and k.binding.var.same_as(sources[0])), None)
            if (producer is not None and producer not in into
                    and kernels[producer].pattern == OUT_ELEMWISE_FUSABLE
                    and uses.get(sources[0], 0) == 1):
                into[producer] = i
        if not into:
            new_blocks.append(block)
            continue
        for i in sorted(into):  # a group ends at its last member (each points later)
            while into[i] in into:
                into[i] = into[into[i]]
            group_of.setdefault(into[i], []).append(i)
        bindings = []
        for i, binding in enumerate(block.bindings):
            if i in into:
                continue
            if i not in group_of:
                bindings.append(binding)
                continue
            members = [kernels[j] for j in sorted([*group_of[i], i])]
            func, args = _merged(members)
            name = "fused_" + "_".join(m.name for m in members)
            gvar = builder.add_func(func, name)
            bindings.append(relax.VarBinding(binding.var, relax.Call(gvar, args)))
            merged_any = True
        new_blocks.append(relax.DataflowBlock(bindings))
    if not merged_any:
        return mod
    mod = builder.get()
    mod["main"] = relax.Function(main.params, relax.SeqExpr(new_blocks, main.body.body),
                                 main.ret_ty, main.is_pure, main.attrs)
    return relax.transform.DeadCodeElimination()(relax.transform.Normalize()(mod))

