"""Compile a whole workload with a session's tuned records into a deployable library."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tvmtui.core.errors import UserError
from tvmtui.sessions import store as st
from tvmtui.sessions.msdb import (
    confirmed_is_current,
    count_records,
    repair_json_lines,
    tuned_database,
)


def export_session(session: st.Session, out: Path) -> dict:
    """Write `<out>` (a .so) or `<out>/model.so`, plus a `.json` metadata file beside it."""
    meta = session.meta()
    if out.suffix in (".so", ".tar"):
        lib_path, meta_path = out, out.with_suffix(".json")
    else:
        lib_path, meta_path = out / "model.so", out / "model.json"
    if out.exists() and not out.is_dir() and lib_path != out:
        raise UserError(f"{out} is an existing file: export to a folder or a new .so path "
                        f"(e.g. {out}.so)")
    for path in (lib_path.parent, *lib_path.parent.parents):
        if path.exists() and not path.is_dir():
            raise UserError(f"cannot export under {path}: it is a file, not a folder")
    try:
        lib_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {lib_path.parent}: {exc.strerror}") from None
    notes = []
    if not session.worker_alive():
        for name in (st.WORKLOAD_DB, st.RECORD_DB):
            dropped = repair_json_lines(session.file(name))
            if dropped:
                notes.append(f"repaired {name}: dropped {dropped} line(s) cut short by a crash")
    stored = meta.get("fingerprint")
    if stored and meta.get("device", {}).get("kind", "local") in ("local", "cuda"):
        from tvmtui.devices.fingerprint import differences, this_fingerprint

        here = this_fingerprint().to_json()
        if here["id"] != stored.get("id"):
            notes.append(
                f"tuned on another chip ({'; '.join(differences(stored, here)) or stored.get('id')}):"
                f" its timings may not hold here; `tvmtui resume {session.name} --transfer` "
                "re-measures its best records on this chip"
            )
    if count_records(session.file(st.RECORD_DB)) == 0:
        raise UserError(
            f"session {session.name!r} has no tuning records yet; tune it before exporting"
        )

    from tvmtui.graph import lowering
    from tvmtui.graph import variants as gv
    from tvmtui.graph.relax_import import load_relax
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(meta["target"])

    target = tvm.target.Target(meta["target"])
    workload = meta["workload"]
    revision = gv.session_revision(meta)  # as it was tuned
    base = load_relax(
        workload.get("format", "onnx"),
        session.file(st.model_file(workload)).read_bytes(),
        workload["input_shapes"],
        revision,
    )
    # The variant the worker measured fastest (sessions from before variants: stock).
    variant = meta.get("variant") or gv.DEFAULT
    mod, plan = gv.prepare(base, target, variant, revision=revision)
    database, left_out, wrong = tuned_database(session)
    if left_out:
        notes.append(f"{left_out} tuning record(s) left out: their schedules do not replay in "
                     "this TVM (its trace replay of some rfactor schedules fails); the "
                     "library is built from the others")
    if wrong:
        notes.append(f"{wrong} tuning record(s) left out: TVM's RewriteLayout packed their "
                     "weight by the wrong axis (a transposed weight, as a ConvTranspose's); "
                     "those layers use their next record, or TVM's default schedule; "
                     "`tvmtui resume` tunes them again without it")
    start = time.time()
    executable = lowering.compile_tuned(database, mod, target, revision)
    from tvmtui.devices.cross import export_options

    executable.export_library(str(lib_path), **export_options(meta["target"]))
    info = {
        "library": str(lib_path),
        "session": session.name,
        "workload": meta["workload"]["name"],
        "graph_hash": meta["workload"]["graph_hash"],
        "input_shapes": meta["workload"]["input_shapes"],
        "target": meta["target"],
        "best_ms": meta.get("best_ms"),
        "variant": variant,
        "variant_label": plan.label,
        # Built from the records confirmed by measuring them again after tuning.
        "confirmed": confirmed_is_current(session),
        "trials": meta.get("trials", 0),
        "versions": meta.get("versions", {}),
        "device": meta.get("device", {"kind": "local"}),
        "fingerprint": meta.get("fingerprint"),
        "compile_s": round(time.time() - start, 2),
        # TVM on x86 runs half the hardware threads unless told (it assumes hyper-threading),
        # and re-reads the CPU count from /sys at every parallel kernel launch.
        "run_with": {"TVM_NUM_THREADS": int(meta["target"].get("num-cores", 1))},
        "exported": time.time(),
        "notes": notes,
    }
    meta_path.write_text(json.dumps(info, indent=2) + "\n")
    info["metadata"] = str(meta_path)
    return info
