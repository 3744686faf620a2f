"""Cross-compiling for a board whose architecture differs from the host's."""

from __future__ import annotations

import platform
import shutil

from tvmtui.core.errors import UserError

# target triple prefix -> (host machines that build natively, Debian cross compiler)
_CROSS = {
    "aarch64": (("aarch64", "arm64"), "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu"),
    "arm": (("armv7l",), "arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf"),
}


def cross_compiler_for(triple: str | None) -> str | None:
    """The compiler that links libraries for `triple`, or None when the host's own does."""
    if not triple:
        return None
    for prefix, (native, compiler, package) in _CROSS.items():
        if triple.startswith(prefix):
            if platform.machine() in native:
                return None
            if shutil.which(compiler) is None:
                raise UserError(
                    f"the target is {triple} and this host is {platform.machine()}: install "
                    f"the cross compiler (apt-get install {package})"
                )
            return compiler
    return None


def export_options(target) -> dict:
    """Keyword arguments for `export_library` (an `fcompile` when cross-compiling)."""
    triple = target.get("mtriple") if isinstance(target, dict) else target.attrs.get("mtriple")
    compiler = cross_compiler_for(str(triple) if triple else None)
    if compiler is None:
        return {}
    from tvm.support import cc

    return {"fcompile": cc.cross_compiler(compiler)}
