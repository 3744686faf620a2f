"""The passes that lower a prepared graph (`variants.prepare`) to fused TIR kernels: for
task extraction, and with a tuning database for export and bench. Both run the same
passes for a session's rewrite revision, so the database's keys match.
"""

from __future__ import annotations

# LLVM options every tuning candidate and tuned library is compiled with. GVN's memory
# dependence analysis took half of LLVM's time on a blocked Winograd kernel's unrolled
# transforms (C12: 2.5-2.7 s a candidate, 1.0-1.5 s without it); measured kernels ran
# alike with and without it (Winograd, blocked direct and pointwise convs: 0.96-1.03x).
CODEGEN_CL_OPTS = ("-enable-gvn-memdep=false",)


def codegen_target(target):
    """`target` as candidates and tuned libraries are compiled for it: on LLVM targets,
    with `CODEGEN_CL_OPTS` (the session keeps its own target: keys and reuse match)."""
    import tvm

    if target.kind.name != "llvm":
        return target
    config = dict(target.export())
    extra = [o for o in CODEGEN_CL_OPTS if o not in config.get("cl-opt", ())]
    if not extra:
        return target
    config["cl-opt"] = [*config.get("cl-opt", ()), *extra]
    if target.host is not None:
        config["host"] = codegen_target(target.host).export()
    return tvm.target.Target(config)


def fuse_passes(target, revision: int = 1):
    """The Relax passes that turn operators into fused TIR functions, exactly as
    `ms.relax_integration.compile_relax` runs them (revision 1, the default), so database
    keys match at export; with the session's rewrite `revision`, on CPUs, from 10 each
    kernel's constant operands are layout-free (MetaSchedule's RewriteLayout may store them
    in the order its schedule reads them) and from 11 layout transforms are absorbed into
    the kernel next to them (`absorb.py`)."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline

    try:
        dispatch = list(pipeline.library_dispatch_passes(target))
    except (ValueError, AttributeError):
        dispatch = []
    cpu = target.kind.name == "llvm"
    absorb = []
    if revision >= 11 and cpu:
        from tvmtui.graph.absorb import absorb_layout_transforms

        absorb = [tvm.transform.module_pass(lambda mod, _ctx: absorb_layout_transforms(mod),
                                            opt_level=0, name="AbsorbLayoutTransforms")]
    return [
        *dispatch,
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        *absorb,
        relax.transform.FuseTIR(),
        *([relax.transform.AttachAttrLayoutFreeBuffers()] if revision >= 10 and cpu else []),
    ]


def extract_tasks(mod, target, revision: int = 1):
    """MetaSchedule tasks of a prepared Relax module (fused here: unfused gives none),
    lowered as rewrite `revision` lowers them (`fuse_passes`)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    with target:
        fused = tvm.transform.Sequential(fuse_passes(target, revision))(mod)
    return ms.relax_integration.extract_tasks(fused, target)


def compile_tuned(database, mod, target, revision: int = 1):
    """A prepared module compiled with a tuning database (untuned functions get defaults).

    `compile_relax`'s pipeline, plus one fix: a schedule that rewrote a weight's layout
    (Winograd's transformed kernel is layout-free) carries that rewrite as a block run on
    every call; split it out and fold it into the constant, as the tuner measured it.
    """
    import tvm
    from tvm import relax
    from tvm.relax import pipeline

    try:
        lower = [*pipeline.dataflow_lower_passes(target), *pipeline.finalize_passes(target)]
    except AttributeError:
        if target.kind.name != "llvm":
            raise
        # TVM 0.27's relax.backend.cpu_generic does not export dataflow_lower_passes (its
        # pipeline module defines it): without this, every CPU build fell back to
        # compile_relax, which runs Winograd's weight rewrite on every call.
        from tvm.relax.backend.cpu_generic import pipeline as cpu

        lower = [*cpu.dataflow_lower_passes(target), *cpu.finalize_passes(target)]
    except ValueError:
        from tvm.s_tir import meta_schedule as ms

        return ms.relax_integration.compile_relax(database, mod, target, params=None)

    @tvm.transform.module_pass(opt_level=3)
    def tuned_pipeline(mod, _ctx):
        mod = tvm.transform.Sequential(fuse_passes(target, revision))(mod)
        mod = relax.transform.MetaScheduleApplyDatabase()(mod)
        mod = relax.transform.SplitLayoutRewritePreproc()(mod)
        mod = relax.transform.FoldConstant()(mod)
        return tvm.transform.Sequential(lower)(mod)

    with target, database, tvm.transform.PassContext(opt_level=3):
        return relax.build(mod, target=codegen_target(target), relax_pipeline=tuned_pipeline)
