"""Importing TVM for a target: only its own CPU family's tensor intrinsics, the others
when a later target in the same process needs them; and the target code is built for."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
from tvmtui.kernels.tvm_env import import_tvm
import_tvm({"kind": "llvm", "mtriple": "x86_64-linux-gnu"})
from tvm.s_tir import TensorIntrin

def has(name):
    try:
        return TensorIntrin.get(name) is not None
    except Exception:
        return False

print(has("dot_16x4_avx512"), has("dot_4x4_i8i8s32_neon"))
import_tvm({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
print(has("dot_16x4_avx512"), has("dot_4x4_i8i8s32_neon"))
"""


def test_an_x86_target_skips_the_arm_intrinsics_until_an_arm_target_needs_them():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["True", "False", "True", "True"], run.stdout


def test_llvm_facts_are_cached_per_tvm_build_and_cpu(tmp_path, monkeypatch):
    """`tune` asks LLVM for this host's triple and CPU without importing TVM once cached;
    a cache written for another TVM build or CPU is asked again, not believed."""
    import json

    from tvmtui.devices import fingerprint

    monkeypatch.setenv("TVMTUI_CACHE", str(tmp_path))
    first = fingerprint.llvm_facts()
    cached = json.loads((tmp_path / "llvm-host.json").read_text())
    assert cached == {"key": fingerprint._facts_key(), "facts": first} and first["cpu"]
    (tmp_path / "llvm-host.json").write_text(json.dumps({"key": "other", "facts": {"cpu": "x"}}))
    assert fingerprint.llvm_facts() == first
    assert json.loads((tmp_path / "llvm-host.json").read_text())["key"] == fingerprint._facts_key()


def test_candidates_and_libraries_compile_with_the_codegen_options_once():
    from tvmtui.devices.local import local_cpu_target
    from tvmtui.graph.lowering import CODEGEN_CL_OPTS, codegen_target
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(local_cpu_target())
    target = tvm.target.Target(local_cpu_target())
    built = codegen_target(target)
    assert list(built.attrs["cl-opt"]) == list(CODEGEN_CL_OPTS)
    assert codegen_target(built).export() == built.export()  # applied once
    # Everything else is the session's target.
    rest = {k: v for k, v in built.export().items() if k != "cl-opt"}
    assert str(tvm.target.Target(rest)) == str(target)
