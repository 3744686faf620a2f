"""How a target's vector unit blocks channels: the float32 lanes that size `nchwc`'s
channel block, its register count, and the block of a layer whose channels it does not
divide."""

from __future__ import annotations


def vector_block(target) -> int:
    """float32 lanes of the target's widest vector unit (the channel block of `nchwc`)."""
    from tvm.target import codegen

    triple = str(target.attrs.get("mtriple", "") or "")
    if triple.startswith(("aarch64", "arm")):
        return 4
    for feature, lanes in (("avx512f", 16), ("avx2", 8), ("avx", 8)):
        try:
            if codegen.target_has_features(feature, target):
                return lanes
        except Exception:  # noqa: BLE001 - an unknown feature name on this LLVM
            continue
    return 4


def vector_registers(target) -> int:
    """Vector registers of the target: 32 on AArch64 and with AVX-512, 16 otherwise (AVX2,
    SSE, 32-bit Arm NEON)."""
    triple = str(target.attrs.get("mtriple", "") or "")
    if triple.startswith(("aarch64", "arm64")):
        return 32
    return 32 if vector_block(target) == 16 else 16


def input_block(channels: int, block: int) -> int:
    """The largest power of two up to `block` that divides `channels` (1 for RGB)."""
    inner = block
    while channels % inner:
        inner //= 2
    return inner
