"""The Textual app: a reader and controller of sessions; TVM runs only in worker processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.notifications import SeverityLevel

from tvmtui.core.errors import UserError
from tvmtui.core.paths import DEMO_NAME
from tvmtui.sessions import store as st
from tvmtui.tui.screens import (
    BenchDone,
    LaunchScreen,
    LiveScreen,
    MessageModal,
    SessionsScreen,
    WorkerExit,
    run_cli,
)
from tvmtui.tui.sources import LiveSource, ReplaySource

HELP = """\
Screens: F2 sessions, n new session (from Sessions), Esc back.

Live tuning
  p      pause / resume the worker (between batches)
  s      stop the worker (asks first)
  +      change the total trial budget
  b      run the baselines for this session (tvmtui bench, in a subprocess)
  e      export the tuned library
  1-5    tabs: tasks, trials, charts, baselines, boards (per-board health on RPC devices)
  Enter  on a trial: its error and schedule trace

Replay
  space  play / pause     n  step one round     [ ]  slower / faster

Sessions
  Enter open live   r resume   y replay   e export   d delete   n new

q quits the app; workers keep tuning (`tvmtui attach NAME` or reopen the app).
Ctrl+P opens the command palette.
"""



class Report(Message):
    """What background work has to tell the user (a notification), or a session to follow."""

    def __init__(self, text: str = "", severity: SeverityLevel = "information", timeout: float = 5,
                 open_live: str | None = None):
        super().__init__()
        self.text, self.severity, self.timeout, self.open_live = text, severity, timeout, open_live


class TvmTuiApp(App):
    """tvmtui: pick a workload and a device, tune, watch, control, replay."""

    CSS_PATH = "app.tcss"
    TITLE = "tvmtui"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("f2", "sessions", "Sessions", show=False),
    ]

    def __init__(
        self,
        root: Path,
        *,
        start: str = "launch",
        session: str | None = None,
        speed: float = 10.0,
    ):
        super().__init__()
        if "TEXTUAL_ANIMATIONS" not in os.environ:
            # Over SSH every animation frame is bytes on a slow link: show changes at once.
            self.animation_level = "none"
        self.root = root
        self.start = start
        self.start_session = session
        self.speed = speed
        self._target: dict | None = None

    def on_mount(self) -> None:
        if self.start == "live" and self.start_session:
            self.open_live(self.start_session)
        elif self.start == "replay" and self.start_session:
            self.open_replay(self.start_session, self.speed)
        elif self.start == "sessions":
            self.show_sessions()
        else:
            self.show_launch()

    # ---- navigation ----------------------------------------------------------------
    def _show(self, screen) -> None:
        if len(self.screen_stack) > 1:
            self.switch_screen(screen)
        else:
            self.push_screen(screen)

    def show_launch(self) -> None:
        self._show(LaunchScreen())

    def show_sessions(self) -> None:
        self._show(SessionsScreen(self.root))

    def _session_root(self, name: str) -> Path:
        return st.resolve_root(self.root, name)

    def open_live(self, name: str) -> None:
        try:
            source = LiveSource(self._session_root(name), name)
        except UserError as exc:
            self.notify(str(exc), severity="error", timeout=10)
            return
        self._show(LiveScreen(source, self.root))

    def open_replay(self, name: str, speed: float | None = None) -> None:
        try:
            source = ReplaySource(self._session_root(name), name, speed or self.speed)
        except UserError as exc:
            self.notify(str(exc), severity="error", timeout=10)
            return
        if not source.events:
            source.close()
            self.notify(f"session {name} has no events to replay", severity="warning")
            return
        self._show(LiveScreen(source, self.root))

    def action_sessions(self) -> None:
        self.show_sessions()

    def action_help(self) -> None:
        self.push_screen(MessageModal("tvmtui keys", HELP))

    # ---- the local device ----------------------------------------------------------
    def local_target(self) -> dict:
        """The local CPU target (imports TVM once: call it from a thread worker)."""
        if self._target is None:
            from tvmtui.devices.local import local_cpu_target

            self._target = local_cpu_target()
        return self._target

    # ---- actions that start processes (never on the event loop) -------------------------
    @work(thread=True, exclusive=True, group="start")
    def start_tuning(
        self, spec: str, shapes: list[str], trials: int, name: str | None, baselines: list[str],
        device: str = "local", minutes: float | None = None,
    ) -> None:
        from tvmtui.sessions.launch import (
            create_session,
            default_name,
            spawn_worker,
            wait_for_lock,
        )
        from tvmtui.workloads import load_workload

        try:
            if trials < 1:
                raise UserError("the trial budget must be at least 1")
            if name:
                st.check_name(name)
            workload = load_workload(spec, shapes)
            name = name or default_name(workload)
            if device == "local":
                target, fingerprint, dev = self.local_target(), None, None
            else:
                from tvmtui.devices.resolve import resolve_device

                resolved = resolve_device(device)
                target, fingerprint = resolved.target, resolved.fingerprint
                dev = resolved.device.to_json()
            session = create_session(
                self.root, name, workload, target, trials,
                {"baselines": baselines, "minutes": minutes},
                device=dev, fingerprint=fingerprint,
            )
            from tvmtui.sessions.launch import same_chip_sessions

            prior = same_chip_sessions(self.root, workload.graph_hash, target,
                                       session.meta()["fingerprint"]["id"])
            prior = [p for p in prior if p.name != name]
            pid = spawn_worker(session)
            wait_for_lock(session, pid)
            session.close()
            if prior:
                self.post_message(Report(
                    f"{prior[0].name} already tuned this workload on this chip "
                    f"({prior[0].trials} trials): resume it from Sessions (r)", timeout=10))
        except UserError as exc:
            self.post_message(Report(str(exc), "error", 10))
            return
        except (OSError, RuntimeError) as exc:  # a sessions path that is a file, a dead worker
            self.post_message(Report(f"could not start: {type(exc).__name__}: {exc}", "error", 10))
            return
        self.post_message(Report(open_live=name))

    @work(thread=True, group="resume")
    def resume_session(self, name: str, more: int | None = None) -> None:
        """`tvmtui resume NAME [--trials MORE]` in a subprocess, then follow it."""
        extra = ["--trials", str(more)] if more else []
        try:
            run_cli(["resume", name, *extra, "--detach"], self.root, timeout=120)
        except WorkerExit as exc:
            self.post_message(Report(str(exc), "error", 10))
            return
        self.post_message(Report(open_live=name))

    @work(thread=True, group="export")
    def export_session(self, name: str) -> None:
        if self._session_root(name) != self.root:
            self.post_message(Report("the bundled demo is read-only", "warning"))
            return
        out = self.root / name / "export"
        self.post_message(Report(f"exporting {name} (compiling in a subprocess)..."))
        try:
            run_cli(["export", name, str(out), "--json"], self.root)
        except WorkerExit as exc:
            self.post_message(Report(str(exc), "error", 10))
            return
        self.post_message(Report(f"exported {out / 'model.so'}", timeout=10))

    @work(thread=True, group="bench")
    def run_bench(self, name: str, screen) -> None:
        """`tvmtui bench NAME` in a subprocess; the report reaches the screen through the
        session's event stream, this only says when it ended."""
        args = ["bench", name, "--json"]
        try:
            session = st.Session.open(self._session_root(name), name)
            chosen = session.meta().get("options", {}).get("baselines")
            session.close()
            if chosen:
                args += ["--baselines", ",".join(chosen)]
            report = json.loads(run_cli(args, self.root))
        except (WorkerExit, UserError) as exc:
            screen.post_message(BenchDone(f"baselines failed: {exc}", True))
            return
        tuned = next((b for b in report["baselines"] if b["name"] == "tvm-tuned"), None)
        failed = [b["name"] for b in report["baselines"] if b.get("parity") and not b["parity"]["passed"]]
        text = f"baselines done on {report.get('device') or 'local CPU'} in {report['seconds']:.0f} s"
        if tuned and tuned["median_ms"]:
            text += f"; tuned TVM {tuned['median_ms']:.3f} ms"
        if failed:
            text += f"; parity FAILED for {', '.join(failed)}"
        screen.post_message(BenchDone(text, bool(failed)))

    def on_report(self, report: Report) -> None:
        if report.text:
            self.notify(report.text, severity=report.severity, timeout=report.timeout)
        if report.open_live:
            self.open_live(report.open_live)

    # ---- command palette -------------------------------------------------------------
    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        yield SystemCommand("Sessions", "List saved sessions", self.show_sessions)
        yield SystemCommand("New session", "Pick a workload and a device", self.show_launch)
        yield SystemCommand("Replay demo", "Play the bundled demo session",
                            lambda: self.open_replay(DEMO_NAME))
        yield SystemCommand("Help", "Keys and screens", self.action_help)
        if isinstance(screen, LiveScreen):
            for title, text, action in (
                ("Pause / resume", "Pause or resume the worker", screen.action_pause),
                ("Stop", "Stop the worker after its batch", screen.action_stop),
                ("Change budget", "Set the total trial budget", screen.action_budget),
                ("Run baselines", "Compare against TFLite, ONNX Runtime, ...", screen.action_baselines),
                ("Export", "Compile the tuned library", screen.action_export),
            ):
                yield SystemCommand(title, text, action)
