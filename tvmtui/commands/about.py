"""`tvmtui --version`: tvmtui's version, the TVM and LLVM it runs on, and this chip."""

from __future__ import annotations


def version_lines() -> list[str]:
    """Three lines; reading the chip imports nothing heavy, and LLVM's answer is cached."""
    from tvmtui import __version__
    from tvmtui.devices.fingerprint import this_fingerprint
    from tvmtui.kernels.tvm_env import versions

    fp = this_fingerprint()
    pkg = versions()
    tvm = f"TVM {pkg['apache-tvm']} (apache-tvm-ffi {pkg['apache-tvm-ffi'] or '?'})" \
        if pkg["apache-tvm"] else "TVM not installed"
    chip = fp.model_name or fp.arch
    return [
        f"tvmtui {__version__}",
        f"{tvm}, LLVM {fp.llvm or 'unknown'}, Python {pkg['python']}",
        f"chip: {chip} ({fp.arch}, {fp.cores} cores; {' '.join(fp.isa) or 'no ISA extensions read'}; "
        f"fingerprint {fp.id}{', faked' if fp.faked else ''})",
    ]


def cmd_version() -> int:
    print("\n".join(version_lines()))
    return 0
