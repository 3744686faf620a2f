"""What `tvmtui bench TARGET` compares: a session (its model and tuned records), or a
workload / model file (with the best matching session's records, when there is one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tvmtui.baselines.floattwin import FloatTwin, find_float_twin
from tvmtui.baselines.model import BenchModel, bench_model
from tvmtui.core import events as ev
from tvmtui.core.errors import UserError
from tvmtui.sessions import store as st
from tvmtui.sessions.launch import best_same_chip_session


@dataclass
class BenchTarget:
    model: BenchModel
    target: dict
    graph_hash: str
    session: st.Session | None
    writable: bool  # results may be saved into the session
    tuned_reason: str | None
    notes: list[str] = field(default_factory=list)  # said before the table and in the report
    device: dict | None = None  # a board session's device: the baselines run on that board
    board_cores: int | None = None
    float_twin: FloatTwin | None = None  # an int8 zoo twin's tuned float network



def resolve(root: Path, spec: str, shape_items: list[str] | None) -> BenchTarget:
    from tvmtui.workloads.loader import graph_hash

    where = st.resolve_root(root, spec)
    if "/" not in spec and ".." not in spec and (where / spec / st.DB_FILE).is_file():
        session = st.Session.open(where, spec)
        meta = session.meta()
        device = meta.get("device") or {"kind": "local"}
        if device.get("kind", "local") not in ("local", "tracker", "rpc"):
            raise UserError(f"session {spec!r} was tuned on a {device['kind']} device; "
                            "`tvmtui bench` runs on the local CPU or on a board")
        remote = device if device.get("kind") in ("tracker", "rpc") else None
        workload = meta["workload"]
        data = session.file(st.model_file(workload)).read_bytes()
        if graph_hash(data, workload["input_shapes"]) != workload["graph_hash"]:
            raise UserError(
                f"the model file in session {spec!r} changed since it was tuned (graph hash "
                "mismatch); its records no longer describe it: start a new session"
            )
        cores = (meta.get("fingerprint") or {}).get("cores") or meta["target"].get("num-cores")
        return BenchTarget(bench_model(workload, data), meta["target"], workload["graph_hash"],
                           session, writable=where == root, tuned_reason=None, device=remote,
                           board_cores=int(cores) if remote and cores else None,
                           float_twin=None if remote else find_float_twin(
                               root, workload.get("source", ""), meta["target"]))

    from tvmtui.devices.local import local_cpu_target
    from tvmtui.workloads import load_workload

    workload = load_workload(spec, shape_items)
    target = local_cpu_target()
    model = bench_model(workload.meta(), workload.model_bytes)
    tuned = best_same_chip_session(root, workload.graph_hash, target)
    if tuned is None:
        return BenchTarget(
            model, target, workload.graph_hash, None, writable=False,
            tuned_reason=f"no tuned session of {workload.name} on this target and chip in {root}; "
            f"tune it first: tvmtui tune {spec}", notes=workload.notices,
        )
    return BenchTarget(model, target, workload.graph_hash, tuned, writable=True,
                       tuned_reason=None,
                       notes=[*workload.notices,
                              f"tvm-tuned uses session {tuned.name!r} (same graph and target)"],
                       float_twin=find_float_twin(root, workload.source, target))


def save_report(session: st.Session, report) -> None:
    """Append the report to the session's stream and keep its summary in the metadata."""
    session.append(ev.BENCH, report.to_json())
    session.set_meta(bench=report.summary())
