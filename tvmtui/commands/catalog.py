"""What there is: devices and trackers, saved sessions, the built-in zoo."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tvmtui import fmt
from tvmtui.commands.common import open_session, print_json, sessions_dir
from tvmtui.core.errors import UserError
from tvmtui.sessions import catalog
from tvmtui.sessions import store as st


def cmd_devices(args) -> int:
    from tvmtui.devices.fingerprint import this_fingerprint
    from tvmtui.devices.local import local_cpu_target, local_gpus

    obj = {"local": {"target": local_cpu_target(), "fingerprint": this_fingerprint().to_json(),
                     "gpus": local_gpus()}}
    if args.tracker:
        from tvmtui.devices import rpc

        host, port = rpc.parse_hostport(args.tracker)
        obj["tracker"] = {"address": f"{host}:{port}", "keys": rpc.tracker_keys(host, port)}
        if args.key:
            device = rpc.Device("tracker", host, port, args.key)
            sess, addr, _ = rpc.connect_device(device, session_timeout=30, wait=30)
            obj["board"] = dict(rpc.board_info(sess), server=addr, key=args.key)
    if args.json:
        print_json(obj)
        return 0
    _print_devices(obj)
    return 0


def _print_devices(obj: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from tvmtui.devices.local import describe_target

    console = Console()
    columns = [("local", obj["local"])]
    if "board" in obj:
        columns.append((f"board {obj['board']['key']} ({obj['board']['server']})", obj["board"]))
    table = Table(title="devices")
    table.add_column("")
    for title, _ in columns:
        table.add_column(title)
    rows = ["id", "arch", "vendor", "model_name", "family", "model", "stepping", "microcode",
            "implementer", "part", "variant", "revision", "cores", "caches", "isa", "kernel",
            "llvm", "tvm"]
    for row in rows:
        cells = []
        for _, col in columns:
            value = (col.get("fingerprint") or {}).get(row)
            if isinstance(value, dict):
                value = " ".join(f"{k} {v}" for k, v in value.items())
            elif isinstance(value, list):
                value = " ".join(value)
            cells.append("-" if value in (None, "") else str(value))
        if any(c != "-" for c in cells):
            table.add_row(row, *cells)
    table.add_row("target", *[json.dumps(col.get("target")) for _, col in columns])
    console.print(table)
    local = obj["local"]
    console.print(f"local CPU: {describe_target(local['target'])}; "
                  f"GPUs: {', '.join(g['name'] for g in local['gpus']) or 'none'}")
    if "tracker" in obj:
        keys = Table(title=f"tracker {obj['tracker']['address']}")
        for col in ("key", "total", "free", "pending", "servers"):
            keys.add_column(col)
        for key, entry in sorted(obj["tracker"]["keys"].items()):
            keys.add_row(key, str(entry["total"]), str(entry["free"]), str(entry["pending"]),
                         " ".join(entry["servers"]))
        console.print(keys)


def cmd_sessions(args) -> int:
    root = sessions_dir(args)
    if args.action == "list":
        found, broken = catalog.list_sessions(root)
        if args.json:
            print_json([s.to_json() for s in found])
        else:
            _print_sessions(found, root)
        for _name, err in broken:
            print(f"warning: {err}", file=sys.stderr)
        return 0
    if not args.name:
        raise UserError(f"`tvmtui sessions {args.action}` needs a session name")
    if args.action == "show":
        from tvmtui.sessions.view import view_of

        session = open_session(args, args.name)
        summary = session.summary()
        meta = session.meta()
        view = view_of(session)
        obj = summary.to_json()
        obj.update(
            {
                "workload_info": meta["workload"],
                "options": meta.get("options", {}),
                "versions": meta.get("versions", {}),
                "device": meta.get("device", {"kind": "local"}),
                "fingerprint": meta.get("fingerprint"),
                "transfer": meta.get("transfer"),
                "events": session.count_events(None),
                "path": str(session.path),
                "variant": view.variant,
                "variant_label": view.label(view.variant),
                "variants_ms": view.variants_ms,
                "confirmed_ms": view.confirmed_ms,
                "tasks": [
                    {"index": r.index, "name": r.name, "variant": r.variant,
                     "variant_label": view.label(r.variant), "weights": r.weights,
                     "trials": r.trials, "best_ms": r.best_s * 1000 if r.best_s else None,
                     "gflops": r.gflops, "failed": r.failed, "without": r.without,
                     "confirmed_ms": r.confirmed_ms, "instruction": r.instruction}
                    for r in view.tasks
                ],
            }
        )
        if args.json:
            print_json(obj)
        else:
            for key, value in obj.items():
                print(f"{key:14} {value}")
        return 0
    if args.action == "rm":
        catalog.remove_session(root, args.name)
        print(f"removed session {args.name}")
        return 0
    raise UserError(f"unknown sessions action {args.action!r}")


def _print_sessions(found: list[st.SessionSummary], root: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    if not found:
        print(f"no sessions in {root}")
        return
    table = Table()
    for col in fmt.SESSION_COLUMNS:
        table.add_column(col)
    for s in found:
        table.add_row(*fmt.session_cells(s))
    Console().print(table)


def _zoo_rows() -> list[dict]:
    from tvmtui.workloads import builtin, nets

    rows: list[dict] = []
    for net in nets.NETS.values():
        stats = nets.count(net)
        rows.append({
            "name": net.name,
            "kind": "network",
            "flops": 2 * stats.macs,
            "params": stats.params,
            "input_shape": net.input_shape,
            "description": net.description,
            "layers": stats.layers,
        })
    from tvmtui.workloads.int8 import INT8_TWINS, describe

    for name, float_name in INT8_TWINS.items():
        stats = nets.count(nets.NETS[float_name])
        rows.append({
            "name": name,
            "kind": "network",
            "flops": 2 * stats.macs,
            "params": stats.params,
            "input_shape": nets.NETS[float_name].input_shape,
            "description": describe(name),
            "layers": stats.layers,
        })
    for spec in builtin.OPS.values():
        rows.append({
            "name": spec.name,
            "kind": spec.kind,
            "flops": spec.flops,
            "params": spec.params,
            "input_shape": spec.input_shape,
            "description": spec.describe(),
            "layers": [spec.describe()],
        })
    return rows


def cmd_zoo(args) -> int:
    rows = _zoo_rows()
    if args.action == "list":
        if args.json:
            print_json([{k: v for k, v in r.items() if k != "layers"} for r in rows])
        else:
            for r in rows:
                print(
                    f"{r['name']:14} {r['description'][:44]:44} "
                    f"{r['flops'] / 1e6:9.1f} MFLOP {r['params'] / 1e6:6.2f} M params"
                )
        return 0
    if not args.name:
        raise UserError(f"`tvmtui zoo {args.action}` needs a workload name")
    row = next((r for r in rows if r["name"].lower() == args.name.lower()), None)
    if row is None:
        raise UserError(f"unknown workload {args.name!r}; `tvmtui zoo list` shows them")
    if args.action == "show":
        return _zoo_show(row, args.json)
    return _zoo_export(row, Path(args.dir or "."), args.json)


def _zoo_show(row: dict, as_json: bool) -> int:
    """The workload card, with the number of MetaSchedule tasks for this CPU."""
    from tvmtui.devices.local import local_cpu_target
    from tvmtui.graph.lowering import extract_tasks
    from tvmtui.graph.relax_import import load_relax
    from tvmtui.graph.variants import REWRITE_REVISION, prepare
    from tvmtui.kernels.tvm_env import import_tvm
    from tvmtui.workloads import load_workload

    workload = load_workload(row["name"])
    target = local_cpu_target()
    tvm = import_tvm(target)
    target = tvm.target.Target(target)
    mod, _ = prepare(load_relax(workload.format, workload.model_bytes, workload.input_shapes),
                     target)
    tasks = extract_tasks(mod, target, REWRITE_REVISION)
    card = dict(row, graph_hash=workload.graph_hash, tasks=len(tasks),
                task_names=[t.task_name for t in tasks])
    if as_json:
        print_json(card)
        return 0
    print(f"{card['name']}: {card['description']}")
    print(f"  input {'x'.join(map(str, card['input_shape']))}, "
          f"{card['flops'] / 2e6:.1f} MMACs ({card['flops'] / 1e9:.3f} GFLOP), "
          f"{card['params']:,} parameters, {card['tasks']} tuning tasks, "
          f"graph hash {card['graph_hash']}")
    print(f"  {len(card['layers'])} weighted layers:")
    for layer in card["layers"]:
        print(f"    {layer}")
    return 0


def _zoo_export(row: dict, out: Path, as_json: bool) -> int:
    from tvmtui.workloads import load_workload, nets
    from tvmtui.workloads.int8 import INT8_TWINS, qdq_file

    workload = load_workload(row["name"])
    out.mkdir(parents=True, exist_ok=True)
    stem = workload.name.replace(":", "_")
    path = out / f"{stem}.{workload.format}"
    path.write_bytes(workload.model_bytes)
    written = {"name": workload.name, workload.format: str(path),
               "graph_hash": workload.graph_hash}
    if workload.name in INT8_TWINS:
        qdq = out / f"{stem}-qdq.onnx"
        qdq.write_bytes(qdq_file(workload.name).read_bytes())
        written["onnx"] = str(qdq)
    if workload.name in nets.NETS:
        tfl = out / f"{stem}.tflite"
        tfl.write_bytes(nets.network_files(nets.NETS[workload.name])[1].read_bytes())
        written["tflite"] = str(tfl)
    if as_json:
        print_json(written)
    else:
        print("wrote " + " and ".join(str(v) for k, v in written.items() if k in ("onnx", "tflite")))
    return 0
