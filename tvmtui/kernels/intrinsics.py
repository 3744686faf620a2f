"""tvmtui's tensor intrinsics (registered with `register`, in every process that schedules
or replays a schedule: the worker, export and bench).

`DOT_SDOT` is Arm's `sdot` (4 int32 lanes += 4 int8 broadcast x 4x4 int8), as TVM's
`dot_4x4_i8i8s32_sdot` computes it, written here for the same reason as `DOT_VNNI` below;
both come from one template (`_dot_intrin`).

`DOT_VNNI` is TVM's `dot_16x4_vnni` (16 int32 lanes += 4 uint8 x 16x4 int8) with an
implementation LLVM 22 accepts:
since LLVM 21 `llvm.x86.avx512.vpdpbusd.512` takes its byte operands as <64 x i8>, and TVM
0.27's intrinsic still passes them as <16 x i32> ("Call parameter type does not match
function signature"). Accumulating into a "local" register tile instead measured the same
(MobileNet's 14x14 512->512 pointwise layer: 0.256 against 0.243 ms). The description is
written here, not imported from `tensor_intrin.x86`: an ARM target's process stubs that
family out (`tvm_env`) and still registers every rule.
"""

from __future__ import annotations

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from tvmtui.graph.dotprod import DOT_SDOT, DOT_VNNI


def _dot_intrin(lanes: int, input_dtype: str, llvm_intrinsic: str):
    """(description, implementation) of a dot-product instruction: `lanes` int32
    accumulators += 4 `input_dtype` bytes (one pixel's 4 input channels, broadcast) x
    `lanes` x 4 int8 weights, by the LLVM intrinsic `llvm_intrinsic` taking the bytes as
    one wide int8 vector."""
    quad, wide, acc = f"{input_dtype}x4", f"int8x{4 * lanes}", f"int32x{lanes}"

    @T.prim_func(s_tir=True)
    def desc(
        A: T.Buffer((4,), input_dtype, offset_factor=1),
        B: T.Buffer((lanes, 4), "int8", offset_factor=1),
        C: T.Buffer((lanes,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
            T.writes(C[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(
        A: T.Buffer((4,), input_dtype, offset_factor=1),
        B: T.Buffer((lanes, 4), "int8", offset_factor=1),
        C: T.Buffer((lanes,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
            T.writes(C[0:lanes])
            four = T.reinterpret(A.vload([0], quad), dtype="int32")
            C[T.ramp(T.int32(0), 1, lanes)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(llvm_intrinsic),
                C.vload([0], dtype=acc),
                T.reinterpret(T.broadcast(four, lanes), dtype=wide),
                B.vload([0, 0], dtype=wide),
                dtype=acc,
            )

    return desc, impl


_registered = False


def register() -> None:
    global _registered
    if not _registered:
        TensorIntrin.register(
            DOT_VNNI, *_dot_intrin(16, "uint8", "llvm.x86.avx512.vpdpbusd.512"), override=True)
        TensorIntrin.register(
            DOT_SDOT, *_dot_intrin(4, "int8", "llvm.aarch64.neon.sdot.v4i32.v16i8"),
            override=True)
        _registered = True
