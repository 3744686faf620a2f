"""Chip fingerprints: which exact CPU a measurement was taken on.

A tune is valid only for the chip it was measured on (a different stepping of the same
core can lose 30%). The fingerprint is read from `/proc/cpuinfo` and the sysfs cache
folders, as text, so the same parser reads a board's files fetched over RPC. Its `id`
hashes the fields that identify the silicon (vendor, model, stepping or ARM
implementer/part/variant/revision, cores, caches, ISA); kernel, microcode, LLVM and TVM
versions are recorded beside it and reported, but do not change the id.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

# /proc/cpuinfo flag -> LLVM feature name, for the ISA extensions that change codegen.
X86_ISA = {
    "sse4_2": "sse4.2", "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c",
    "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512dq": "avx512dq",
    "avx512vl": "avx512vl", "avx512_vnni": "avx512vnni", "avx512_bf16": "avx512bf16",
    "avx512_fp16": "avx512fp16", "avx_vnni": "avxvnni", "amx_tile": "amx-tile",
    "amx_int8": "amx-int8", "amx_bf16": "amx-bf16",
}
ARM_ISA = {
    "asimd": "neon", "asimdhp": "fullfp16", "asimddp": "dotprod", "i8mm": "i8mm",
    "bf16": "bf16", "sve": "sve", "sve2": "sve2", "sme": "sme",
}
IDENTITY = ("arch", "vendor", "model_name", "family", "model", "stepping", "implementer",
            "part", "variant", "revision", "cores", "caches", "isa", "gpu")


@dataclass
class Fingerprint:
    arch: str
    vendor: str
    model_name: str
    cores: int
    isa: list[str]
    caches: dict[str, str] = field(default_factory=dict)
    # x86
    family: str | None = None
    model: str | None = None
    stepping: str | None = None
    microcode: str | None = None
    # ARM
    implementer: str | None = None
    part: str | None = None
    variant: str | None = None
    revision: str | None = None
    gpu: dict | None = None  # a session tuned on a GPU: its name and compute capability
    # toolchain and system (recorded, not part of the id)
    kernel: str = ""
    llvm: str | None = None
    tvm: str | None = None
    id: str = ""
    faked: str = ""  # TVMTUI_FAKE_FINGERPRINT's value when this chip is pretended (tests, demos)

    def __post_init__(self) -> None:
        if not self.id:
            ident = {k: getattr(self, k) for k in IDENTITY}
            self.id = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict) -> Fingerprint:
        known = {k: v for k, v in obj.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def label(self) -> str:
        """`AMD EPYC fam 26 model 2 step 1 x2` or `ARM 0x41 part 0xd08 r0p3 x4`; a faked
        fingerprint says so."""
        fake = f" [FAKED by TVMTUI_FAKE_FINGERPRINT={self.faked}]" if self.faked else ""
        if self.implementer:
            return (f"{self.arch} impl {self.implementer} part {self.part} "
                    f"r{_num(self.variant)}p{_num(self.revision)} x{self.cores}{fake}")
        return (f"{self.model_name} fam {self.family} model {self.model} "
                f"step {self.stepping} x{self.cores}{fake}")


def _num(value: str | None) -> str:
    try:
        return str(int(str(value), 0))
    except (TypeError, ValueError):
        return "?"


def differences(a: dict, b: dict) -> list[str]:
    """The identity fields where two fingerprints (as JSON) differ: `stepping 1 -> 2`."""
    out = []
    for key in IDENTITY:
        if a.get(key) != b.get(key):
            out.append(f"{key} {a.get(key)} -> {b.get(key)}")
    return out


def parse_cpuinfo(text: str, arch: str) -> dict:
    """Fields of the first processor block, plus the union of flags / Features."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        fields.setdefault(key, value)
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    table = ARM_ISA if arch in ("aarch64", "arm64", "armv7l") else X86_ISA
    out = {
        "vendor": fields.get("vendor_id") or fields.get("CPU implementer") or "unknown",
        "model_name": fields.get("model name") or fields.get("Model") or fields.get("Hardware") or "",
        "isa": sorted(llvm for flag, llvm in table.items() if flag in flags),
        "family": fields.get("cpu family"),
        "model": fields.get("model"),
        "stepping": fields.get("stepping"),
        "microcode": fields.get("microcode"),
        "implementer": fields.get("CPU implementer"),
        "part": fields.get("CPU part"),
        "variant": fields.get("CPU variant"),
        "revision": fields.get("CPU revision"),
    }
    if out["implementer"] and not out["model_name"]:
        out["model_name"] = f"ARM implementer {out['implementer']} part {out['part']}"
    return out


def read_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[str, str]:
    """`{"L1d": "48K", "L1i": "32K", "L2": "1024K", "L3": "32768K"}` from sysfs."""
    caches: dict[str, str] = {}
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        caches[f"L{level}{suffix}"] = size
    return caches


def versions() -> tuple[str | None, str | None]:
    """(LLVM major version, TVM version) of this process's TVM."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        tvm_version = version("apache-tvm")
    except PackageNotFoundError:
        tvm_version = None
    try:
        llvm = llvm_facts()["llvm"]
    except Exception:  # noqa: BLE001 - a TVM built without LLVM
        llvm = None
    return llvm, tvm_version


def _facts_key() -> str | None:
    """What LLVM's answers about this host depend on: the TVM build (its libraries'
    sizes and times) and the CPU's identity; None when TVM cannot be found."""
    import hashlib
    import importlib.util
    import json
    import platform
    from pathlib import Path

    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.origin:
        return None
    libs = sorted(Path(spec.origin).parent.glob("lib*.so"))
    stamps = [(lib.name, lib.stat().st_size, int(lib.stat().st_mtime)) for lib in libs]
    try:
        cpuinfo = parse_cpuinfo(Path("/proc/cpuinfo").read_text(), platform.machine())
    except OSError:
        cpuinfo = {}
    text = json.dumps([spec.origin, stamps, platform.machine(), cpuinfo], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _ask_llvm() -> dict:
    """TVM's LLVM on this host: major version, system triple and CPU name, and which of
    the x86 features tvmtui checks that CPU name implies."""
    import tvm
    from tvm.target import codegen

    triple, cpu = str(codegen.llvm_get_system_triple()), str(codegen.llvm_get_system_cpu())
    implied = {}
    if triple.startswith(("x86_64", "i686")):
        target = tvm.target.Target({"kind": "llvm", "mtriple": triple, "mcpu": cpu})
        implied = {f: bool(codegen.llvm_cpu_has_features([f], target)) for f in X86_ISA.values()}
    return {"llvm": str(codegen.llvm_version_major()), "triple": triple, "cpu": cpu,
            "implied": implied}


def llvm_facts() -> dict:
    """`_ask_llvm()`, kept in the cache folder per TVM build and CPU: asking imports TVM,
    1.5 s of every `tune` before its worker could start."""
    import json

    from tvmtui.core.paths import llvm_facts_file

    key = _facts_key()
    path = llvm_facts_file()
    if key:
        try:
            cached = json.loads(path.read_text())
            if cached.get("key") == key:
                return cached["facts"]
        except (OSError, ValueError, KeyError):
            pass
    facts = _ask_llvm()
    if key:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps({"key": key, "facts": facts}))
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only cache: ask again next time
    return facts


def local_fingerprint() -> Fingerprint:
    """This machine's fingerprint."""
    arch = platform.machine()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    llvm, tvm_version = versions()
    return Fingerprint(arch=arch, cores=cores, caches=read_caches(), kernel=platform.release(),
                       llvm=llvm, tvm=tvm_version, **parse_cpuinfo(cpuinfo, arch))


def fake_fingerprint(real: Fingerprint, spec: str) -> Fingerprint:
    """`TVMTUI_FAKE_FINGERPRINT=stepping=9,cores=4` (or `tvm=0.26.0`): pretend to be
    another chip or toolchain (tests and demos of the transfer and version checks)."""
    changes = {}
    for item in spec.split(","):
        key, _, value = item.partition("=")
        key = key.strip()
        if key in IDENTITY or key in ("tvm", "llvm", "kernel"):
            changes[key] = int(value) if key == "cores" else value.strip()
    data = dict(real.to_json(), **changes, id="", faked=spec)
    return Fingerprint.from_json(data)


def this_fingerprint() -> Fingerprint:
    """The local fingerprint, or the faked one `TVMTUI_FAKE_FINGERPRINT` asks for."""
    real = local_fingerprint()
    spec = os.environ.get("TVMTUI_FAKE_FINGERPRINT")
    return fake_fingerprint(real, spec) if spec else real


