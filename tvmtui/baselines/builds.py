"""TVM's own rows of a bench: the untuned and the tuned build of a model, compiled once
for a target and cached (keyed by what went into them), cross-compiled for a board."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from tvmtui.baselines.model import BenchModel
from tvmtui.core.paths import builds_dir

# Part of every cached build's key: bump it when the way tvmtui compiles a session changes.
BUILD_REVISION = "2"


def _build_key(*parts) -> str:
    from tvmtui.kernels.tvm_env import versions

    h = hashlib.sha256()
    for part in (*parts, versions().get("apache-tvm"), BUILD_REVISION):
        h.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True).encode())
    return h.hexdigest()[:16]


def untuned_library(model: BenchModel, target: dict) -> Path:
    """TVM's build with no tuning records (cached by model, target and TVM version),
    cross-compiled when the target is another machine's."""
    path = builds_dir() / f"untuned-{_build_key(model.files[model.native], target, model.input_shapes)}.so"
    if path.exists():
        return path
    from tvmtui.graph.relax_import import load_relax
    from tvmtui.graph.variants import prepare
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(target)
    from tvm import relax

    tvm_target = tvm.target.Target(target)
    mod, _ = prepare(load_relax(model.native, model.files[model.native], model.input_shapes),
                     tvm_target)
    from tvmtui.devices.cross import export_options

    executable = relax.build(mod, target=tvm_target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.so")
    executable.export_library(str(tmp), **export_options(target))
    os.replace(tmp, path)
    return path


def tuned_library(session) -> Path:
    """The session's tuned build, cached by its records, model bytes and target (a new
    record means a new build)."""
    from tvmtui.sessions import store as st
    from tvmtui.sessions.export import export_session
    from tvmtui.sessions.msdb import confirmed_is_current

    records = session.file(st.RECORD_DB)
    data = records.read_bytes() if records.exists() else b""
    meta = session.meta()
    model = session.file(st.model_file(meta["workload"])).read_bytes()
    confirmed = session.file(st.CONFIRMED_RECORD_DB)
    if confirmed_is_current(session):
        data += confirmed.read_bytes()
    key = _build_key(data, model, meta["workload"]["input_shapes"], meta["target"],
                     meta.get("variant") or "nchw")
    path = builds_dir() / f"tuned-{key}.so"
    if not path.exists():
        # Built under a temporary name and renamed: a crash mid-build leaves no truncated
        # library for later benches to pick up.
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.so")
        export_session(session, tmp)
        os.replace(tmp.with_suffix(".json"), path.with_suffix(".json"))
        os.replace(tmp, path)
    return path
