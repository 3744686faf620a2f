"""The `tvmtui` command line: tune, follow, control and export sessions headless.

Exit codes: 0 ok, 2 bad input (one-line error), 1 internal failure. The commands live in
`tvmtui/commands/`; this module parses arguments and runs them.
"""

from __future__ import annotations

import argparse
import sys

from tvmtui.commands.about import cmd_version
from tvmtui.commands.app import cmd_app, cmd_replay
from tvmtui.commands.catalog import cmd_devices, cmd_sessions, cmd_zoo
from tvmtui.commands.results import cmd_bench, cmd_export
from tvmtui.commands.tuning import (
    cmd_attach,
    cmd_budget,
    cmd_pause,
    cmd_resume,
    cmd_stop,
    cmd_tune,
)
from tvmtui.core.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--sessions-dir", help="where sessions live (default $TVMTUI_SESSIONS or ./sessions)"
    )
    parser = argparse.ArgumentParser(
        prog="tvmtui",
        description="Tune TVM models with MetaSchedule; watch, control, export. "
        "Without a command: the interactive app.",
    )
    parser.add_argument("--version", action="store_true",
                        help="print the version, the TVM and LLVM it runs on, and this chip")
    parser.add_argument("--web", action="store_true", help="serve the app to a browser")
    parser.add_argument("--host", default="127.0.0.1", help="with --web (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="with --web (default 8000)")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("tune", parents=[common], help="start tuning a workload in a new session")
    p.add_argument(
        "workload",
        help="built-in (resnet18, mobilenet, lstm, dqn, dcgan, the int8 twins mobilenet-int8, "
        "resnet18-int8, dqn-int8, conv:C1..C12, dwconv:D1..D9) or a .onnx / .tflite file",
    )
    p.add_argument("--trials", type=int, default=64, help="trial budget (default 64)")
    p.add_argument("--minutes", type=float,
                   help="time budget: stop searching this many minutes after the worker "
                        "starts, or at --trials, whichever comes first")
    p.add_argument("--session", help="session name (default: workload and time)")
    p.add_argument("--shape", action="append", help="pin an input shape: NAME=1x3x224x224")
    p.add_argument("--json", action="store_true", help="one JSON object per event on stdout")
    p.add_argument("--detach", action="store_true", help="start the worker and return")
    p.add_argument("--headless", action="store_true", help="plain live view instead of the app")
    p.add_argument("--cores", type=int, help="cores to tune for (default: all available)")
    p.add_argument(
        "--device", default="local",
        help="local (default), tracker://HOST:PORT/KEY (any free board under KEY) or rpc://HOST:PORT",
    )
    p.add_argument("--target", help="TVM target as JSON, instead of the one the device reports")
    p.add_argument("--batch", type=int, default=32, help="candidates measured per round")
    p.add_argument("--population", type=int, default=None,
                   help="evolutionary population size (default: sized per task and round so "
                        "that searching takes about as long as measuring the last batch, 64-256)")
    p.add_argument("--genetic-iters", type=int, default=3, help="evolution iterations per round")
    p.add_argument(
        "--warmup-samples", type=int, default=32, help="samples before the cost model guides"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--variants", default="all",
        help="layout/algorithm variants to search: all (default) or a list of nchw, nchwc "
        "(channel-blocked), winograd, subpixel (strided transposed convs); the fastest "
        "measured is what export builds",
    )
    p.add_argument(
        "--no-reuse", action="store_true",
        help="do not warm-start from other sessions' records on this chip (they are "
        "measured again here before they count)",
    )
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("resume", parents=[common], help="continue a paused or ended session")
    p.add_argument("name")
    p.add_argument("--trials", type=int, help="measure this many more trials")
    p.add_argument("--minutes", type=float,
                   help="this run's time budget (default: the one the session was tuned "
                        "with; 0 for none)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--detach", action="store_true", help="start the worker and return")
    p.add_argument(
        "--transfer", action="store_true",
        help="on a different chip: re-measure the best records here, then tune on",
    )
    p.add_argument("--transfer-k", type=int, default=8,
                   help="records per task re-measured by --transfer (default 8)")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("attach", parents=[common], help="follow a session live")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.add_argument("--headless", action="store_true", help="plain live view instead of the app")
    p.set_defaults(func=cmd_attach)

    p = sub.add_parser("replay", parents=[common], help="play a saved session (or `demo`)")
    p.add_argument("name")
    p.add_argument("--speed", type=float, default=10.0, help="times real speed (default 10)")
    p.set_defaults(func=cmd_replay)

    for name, func, text in (
        ("pause", cmd_pause, "pause a running worker after its current batch"),
        ("stop", cmd_stop, "stop a running worker after its current batch"),
    ):
        p = sub.add_parser(name, parents=[common], help=text)
        p.add_argument("name")
        p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for it")
        p.set_defaults(func=func)

    p = sub.add_parser("budget", parents=[common], help="set a session's total trial budget")
    p.add_argument("name")
    p.add_argument("trials", type=int)
    p.set_defaults(func=cmd_budget)

    p = sub.add_parser("export", parents=[common], help="compile the tuned model to a library")
    p.add_argument("name")
    p.add_argument("out", help="a .so path, or a directory for model.so + model.json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "bench", parents=[common],
        help="time baselines beside tuned TVM, with a parity check before any speedup",
    )
    p.add_argument("target", help="a session, a built-in workload or a .onnx / .tflite file")
    p.add_argument(
        "--baselines",
        help="comma list of tflite,acl,onnxruntime,openvino,tvm-untuned (default: all); "
        "tvm-tuned is always added when a tuned session exists",
    )
    p.add_argument("--frames", type=int, default=100, help="parity frames (default 100)")
    p.add_argument("--repeats", type=int, default=100, help="timed runs per baseline (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="untimed runs first (default 10)")
    p.add_argument("--threads", type=int, help="threads for every runtime (default: all cores)")
    p.add_argument("--tolerance", type=float, default=1e-4, help="parity tolerance (default 1e-4)")
    p.add_argument("--inputs", help="folder of .npy (or .npz) input frames instead of seeded ones")
    p.add_argument("--seed", type=int, default=0, help="seed of the random frames")
    p.add_argument(
        "--max-seconds", type=float, default=10.0,
        help="cap on timed seconds per baseline; slow ones get fewer runs (at least 5)",
    )
    p.add_argument("--armnn-delegate", help="path of libarmnnDelegate.so (acl baseline)")
    p.add_argument("--shape", action="append", help="pin an input shape: NAME=1x3x224x224")
    p.add_argument("--no-save", action="store_true", help="do not store results in the session")
    p.add_argument("--json", action="store_true", help="one JSON object with `baselines`")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("devices", help="this machine's target and chip fingerprint; trackers")
    p.add_argument("--tracker", help="HOST:PORT of a TVM RPC tracker: list its keys")
    p.add_argument("--key", help="with --tracker: also read one board's fingerprint")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("sessions", parents=[common], help="list, show or remove sessions")
    p.add_argument("action", choices=["list", "show", "rm"])
    p.add_argument("name", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sessions)

    p = sub.add_parser("zoo", help="built-in workloads: list, show a card, export files")
    p.add_argument("action", choices=["list", "show", "export"])
    p.add_argument("name", nargs="?")
    p.add_argument("dir", nargs="?", help="with export: where to write the model files")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_zoo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse prints its own one-line usage error
        return 2 if exc.code not in (0, None) else 0
    try:
        if args.version:
            return cmd_version()
        if not getattr(args, "command", None):
            args.sessions_dir = None
            return cmd_app(args)
        return args.func(args)
    except UserError as exc:
        print(f"tvmtui: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - an internal failure, still one line
        if _disk_full(exc):
            print(f"tvmtui: the disk is full ({exc}): free some space; what was already "
                  "saved is kept, and `tvmtui resume NAME` continues a session", file=sys.stderr)
            return 1
        print(f"tvmtui: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _disk_full(exc: BaseException) -> bool:
    import errno
    import sqlite3

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, sqlite3.OperationalError) and "full" in str(exc)
