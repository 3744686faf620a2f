"""tvmtui's tensor intrinsics (registered with `register`, in every process that schedules
or replays a schedule: the worker, export and bench).

`DOT_SDOT` is Arm's `sdot` (4 int32 lanes += 4 int8 broadcast x 4x4 int8), as TVM's
`dot_4x4_i8i8s32_sdot` computes it, written here for the same reason as `DOT_VNNI` below.

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


@T.prim_func(s_tir=True)
def _dot_16x4_desc(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        for i in T.serial(0, 16):
            for k in T.serial(0, 4):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")


@T.prim_func(s_tir=True)
def _dot_16x4_vnni(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        quad = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
        C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
            C.vload([0], dtype="int32x16"),
            T.reinterpret(T.broadcast(quad, 16), dtype="int8x64"),
            B.vload([0, 0], dtype="int8x64"),
            dtype="int32x16",
        )


@T.prim_func(s_tir=True)
def _dot_4x4_desc(
    A: T.Buffer((4,), "int8", offset_factor=1),
    B: T.Buffer((4, 4), "int8", offset_factor=1),
    C: T.Buffer((4,), "int32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:4], A[0:4], B[0:4, 0:4])
        T.writes(C[0:4])
        for i in T.serial(0, 4):
            for k in T.serial(0, 4):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")


@T.prim_func(s_tir=True)
def _dot_4x4_sdot(
    A: T.Buffer((4,), "int8", offset_factor=1),
    B: T.Buffer((4, 4), "int8", offset_factor=1),
    C: T.Buffer((4,), "int32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:4], A[0:4], B[0:4, 0:4])
        T.writes(C[0:4])
        quad = T.reinterpret(A.vload([0], "int8x4"), dtype="int32")
        C[T.ramp(T.int32(0), 1, 4)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.sdot.v4i32.v16i8"),
            C.vload([0], dtype="int32x4"),
            T.reinterpret(T.broadcast(quad, 4), dtype="int8x16"),
            B.vload([0, 0], dtype="int8x16"),
            dtype="int32x4",
        )


_registered = False


def register() -> None:
    global _registered
    if not _registered:
        TensorIntrin.register(DOT_VNNI, _dot_16x4_desc, _dot_16x4_vnni,
                              override=True)
        TensorIntrin.register(DOT_SDOT, _dot_4x4_desc, _dot_4x4_sdot, override=True)
        _registered = True
