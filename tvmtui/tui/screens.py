"""Screens of the app: launch, live tuning (or replay), saved sessions, and small modals."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import (
    Button,
    DataTable,
    Footer,
    Input,
    Label,
    OptionList,
    SelectionList,
    Static,
    TabbedContent,
    TabPane,
)
from textual.widgets.option_list import Option

from tvmtui import fmt
from tvmtui.baselines.runners import DEFAULT as DEFAULT_BASELINES
from tvmtui.devices.local import describe_target
from tvmtui.errors import UserError
from tvmtui.sessions import store as st
from tvmtui.sessions.view import SessionView, variants_line
from tvmtui.tui.sources import LiveSource, ReplaySource
from tvmtui.tui.widgets import (
    BaselinePanel,
    BoardTable,
    EstimateChart,
    PredictionChart,
    SummaryBar,
    TaskBestChart,
    TaskTable,
    TrialStream,
)
from tvmtui.workloads import builtin, nets

REFRESH_HZ = 4  # the live screen polls and repaints at most this often
CHART_EVERY = 4  # charts redraw once per this many ticks (plotext is the slow part)


# ---- modals -------------------------------------------------------------------------------
class MessageModal(ModalScreen[None]):
    """A titled block of text (an error, a trial's trace, help)."""

    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close")]

    def __init__(self, title: str, body: str):
        super().__init__()
        self.title_text, self.body = title, body

    def compose(self) -> ComposeResult:
        with Vertical(id="modal"):
            yield Label(self.title_text, id="modal-title")
            with VerticalScroll():
                yield Static(Text(self.body), id="modal-body")
            yield Label("Esc closes", classes="hint")

    def action_dismiss(self) -> None:
        self.dismiss(None)


class ConfirmModal(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="modal"):
            yield Label(self.question, id="modal-title")
            yield Label("y = yes, n = no", classes="hint")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class BudgetModal(ModalScreen[int | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: int, done: int, title: str | None = None):
        super().__init__()
        self.current, self.done = current, done
        self.title_text = title or f"Total trial budget (now {current}, {done} done)"

    def compose(self) -> ComposeResult:
        with Vertical(id="modal"):
            yield Label(self.title_text, id="modal-title")
            yield Input(str(self.current), id="budget-input", type="integer")
            yield Label("Enter sets it, Esc cancels", classes="hint")

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        try:
            value = int(event.value)
        except ValueError:
            value = 0
        if value < 1:
            self.notify("the budget must be a positive number of trials", severity="error")
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class TrackerModal(ModalScreen[str | None]):
    """Ask for a tracker address to add to the device list."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(id="modal"):
            yield Label("Add an RPC tracker (HOST:PORT)", id="modal-title")
            yield Input(placeholder="127.0.0.1:9190", id="tracker-input")
            yield Label("Enter adds it, Esc cancels", classes="hint")

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        from tvmtui.devices.trackers import add_tracker

        try:
            self.dismiss(add_tracker(event.value))
        except UserError as exc:
            self.notify(str(exc), severity="error")

    def action_cancel(self) -> None:
        self.dismiss(None)


# ---- live tuning / replay -------------------------------------------------------------
class BenchDone(Message):
    """A `tvmtui bench` run the app started has ended (its report is in the session)."""

    def __init__(self, text: str, error: bool):
        super().__init__()
        self.text, self.error = text, error


class LiveScreen(Screen):
    """Follows one session: header, tasks, trial stream, charts, baselines, controls."""

    BINDINGS = [
        Binding("p", "pause", "Pause/resume"),
        Binding("s", "stop", "Stop"),
        Binding("plus,equals_sign", "budget", "Budget"),
        Binding("b", "baselines", "Baselines"),
        Binding("e", "export", "Export"),
        Binding("space", "replay_toggle", "Play/pause"),
        Binding("n", "replay_step", "Step"),
        Binding("right_square_bracket", "replay_faster", "Faster"),
        Binding("left_square_bracket", "replay_slower", "Slower"),
        Binding("1", "tab('tasks')", "Tasks", show=False),
        Binding("2", "tab('trials')", "Trials", show=False),
        Binding("3", "tab('charts')", "Charts", show=False),
        Binding("4", "tab('baselines')", "Baselines", show=False),
        Binding("5", "tab('boards')", "Boards", show=False),
        Binding("escape", "leave", "Back"),
    ]

    def __init__(self, source: LiveSource | ReplaySource, root: Path):
        super().__init__()
        self.source = source
        self.root = root
        self.view = SessionView()
        self.status = "starting"
        self.ticks = 0
        self.dirty = True
        self.bench_since: float | None = None  # a bench subprocess is running since then
        self.gone_noticed = False

    def compose(self) -> ComposeResult:
        yield SummaryBar(id="summary")
        with TabbedContent(id="tabs"):
            with TabPane("Tasks", id="tasks"):
                yield Static("", id="variants-line", markup=False)
                yield TaskTable(id="task-table")
                yield TaskBestChart(id="task-chart")
            with TabPane("Trials", id="trials"):
                yield TrialStream(id="trial-stream")
            with TabPane("Charts", id="charts"):
                yield EstimateChart(id="estimate-chart")
                yield PredictionChart(id="prediction-chart")
            with TabPane("Baselines", id="baselines"):
                yield BaselinePanel(id="baseline-panel")
            with TabPane("Boards", id="boards"):
                yield Static("Measurements on the local CPU.", id="boards-note")
                yield BoardTable(id="board-table")
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"tvmtui - {self.source.name}"
        self.tick()
        self.set_interval(1 / REFRESH_HZ, self.tick)

    def on_unmount(self) -> None:
        self.source.close()

    # -- the bounded-rate refresh loop --
    def tick(self) -> None:
        try:
            result = self.source.poll()
        except Exception as exc:  # noqa: BLE001 - e.g. the session was removed meanwhile
            if not self.gone_noticed:
                self.gone_noticed = True
                self.notify(f"cannot read the session: {exc}", severity="error", timeout=10)
            self.status = "disconnected"
            self._render_summary()
            return
        trials = []
        for e in result.events:
            self.view.apply(e)
            if e["event"] == "trial":
                trials.append(e)
        if result.events:
            self.dirty = True
        previous, self.status = self.status, self._status(result.status)
        if previous != self.status and self.status == "crashed":
            self.notify(
                f"the worker of {self.source.name} died; press Esc, then r in Sessions to resume",
                severity="error",
                timeout=15,
            )
        self.ticks += 1
        self._render_summary()
        if trials:
            self.query_one(TrialStream).add_trials(trials, self.view.flops_by_task)
        if self.dirty:
            line = variants_line(self.view)
            variants = self.query_one("#variants-line", Static)
            variants.display = bool(line)
            variants.update(line)
            self.query_one(TaskTable).show(self.view)
            self.query_one(BaselinePanel).show(self.view, self.bench_since)
            self._render_boards()
        if self.dirty and self.ticks % CHART_EVERY == 1:
            self.query_one(EstimateChart).show(list(self.view.estimates))
            self.query_one(TaskBestChart).show(self.view)
            self.query_one(PredictionChart).show(list(self.view.pairs))
            self.dirty = False

    def _render_boards(self) -> None:
        device = self.source.meta.get("device") or {"kind": "local"}
        if device.get("kind", "local") not in ("tracker", "rpc"):
            return
        from tvmtui.devices.rpc import Device

        url = Device(**device).url()
        self.query_one("#boards-note", Static).update(
            f"Measuring on {url}. 'lost': the board went away mid-measurement; "
            "'queue t/o': no free server in time (nothing ran).")
        now = None if self.source.live else self.view.last_t
        self.query_one(BoardTable).show(self.view, now)

    def _status(self, source_status: str) -> str:
        if not self.source.live:
            return "replay" if source_status == "replay" else self.view.state
        if source_status == "crashed":
            return "crashed"
        return self.view.state if source_status in st.LIVE_STATES else source_status

    def _render_summary(self) -> None:
        extra = ""
        if not self.source.live:
            playing = "playing" if self.source.playing else "paused"
            extra = f"  replay {playing} x{self.source.speed:g}"
        now = None if self.source.live else self.view.last_t
        self.query_one(SummaryBar).show(self.view, self.source.name, self.status, extra, now)

    # -- controls --
    LIVE_ACTIONS = ("pause", "stop", "budget", "export")
    REPLAY_ACTIONS = ("replay_toggle", "replay_step", "replay_faster", "replay_slower")

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Show only the controls that apply: worker controls live, playback in a replay."""
        if action in self.LIVE_ACTIONS:
            return self.source.live
        if action in self.REPLAY_ACTIONS:
            return not self.source.live
        return True

    def _live_only(self) -> bool:
        if not self.source.live:
            self.notify("this is a replay: space plays/pauses, n steps, [ ] change speed")
            return False
        if not self.source.worker_alive():
            self.notify(
                f"no worker is running {self.source.name}; resume it from Sessions (r)",
                severity="warning",
            )
            return False
        return True

    def action_pause(self) -> None:
        if not self._live_only():
            return
        if self.view.state == "paused":
            self.source.send("resume")
            self.notify("resuming")
        else:
            self.source.send("pause")
            self.notify("pausing after the current batch")

    def action_stop(self) -> None:
        if not self._live_only():
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.source.send("stop", "stopped from the app")
                self.notify("stopping after the current batch")

        self.app.push_screen(ConfirmModal(f"Stop tuning {self.source.name}?"), answer)

    def action_budget(self) -> None:
        if not self._live_only():
            return

        def answer(value: int | None) -> None:
            if value is not None:
                self.source.send("budget", value)
                self.notify(f"budget set to {value} trials")

        self.app.push_screen(BudgetModal(self.view.budget, self.view.trials), answer)

    def action_baselines(self) -> None:
        """Show the baselines tab and run them for this session in a subprocess."""
        self.action_tab("baselines")
        if not self.source.live:
            self.notify("a replay shows the baseline results recorded with the session")
            return
        if self.bench_since is not None:
            self.notify("the baselines are already running")
            return
        self.bench_since = time.time()
        self.dirty = True
        self.app.run_bench(self.source.name, self)

    def on_bench_done(self, done: BenchDone) -> None:
        self.bench_since = None
        self.dirty = True
        self.notify(done.text, severity="error" if done.error else "information", timeout=10)

    def action_export(self) -> None:
        if not self.source.live:
            self.notify("export a session from Sessions (e)")
            return
        self.app.export_session(self.source.name)

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_replay_toggle(self) -> None:
        if not self.source.live:
            self.source.toggle()
            self._render_summary()

    def action_replay_step(self) -> None:
        if not self.source.live:
            self.source.step()
            self.tick()

    def action_replay_faster(self) -> None:
        if not self.source.live:
            self.source.faster()
            self._render_summary()

    def action_replay_slower(self) -> None:
        if not self.source.live:
            self.source.slower()
            self._render_summary()

    def action_leave(self) -> None:
        self.app.show_sessions()

    @on(DataTable.RowSelected, "#trial-stream")
    def drill_into_trial(self, event: DataTable.RowSelected) -> None:
        trial = int(event.row_key.value)
        found = next((e for e in reversed(self.view.recent) if e["trial"] == trial), None)
        if found is None:
            return
        lines = [
            f"task {found.get('task_name')} (#{found['task']}), trial {trial}",
            f"build {found.get('build_s') or 0:.3f} s, runs {found.get('run_s')}",
            f"predicted score: {found.get('predicted')}",
        ]
        if found.get("error_kind"):
            lines += ["", f"error ({found['error_kind']}):", found.get("error") or ""]
        trace = self.source.trace(trial)
        lines += ["", "schedule trace:", trace or "(not recorded)"]
        self.app.push_screen(MessageModal(f"Trial {trial}", "\n".join(lines)))


# ---- sessions -------------------------------------------------------------------------
class SessionsScreen(Screen):
    BINDINGS = [
        Binding("enter", "open", "Open"),
        Binding("r", "resume", "Resume"),
        Binding("y", "replay", "Replay"),
        Binding("e", "export", "Export"),
        Binding("d", "delete", "Delete"),
        Binding("n", "new", "New"),
        Binding("f5", "refresh", "Refresh"),
    ]

    def __init__(self, root: Path):
        super().__init__()
        self.root = root

    def compose(self) -> ComposeResult:
        yield Label("Sessions", classes="screen-title")
        yield DataTable(id="sessions-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="sessions-note")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for col in fmt.SESSION_COLUMNS:
            table.add_column(col, key=col)
        self.action_refresh()
        self.set_interval(2.0, self.action_refresh)

    def on_screen_resume(self) -> None:
        self.action_refresh()

    def action_refresh(self) -> None:
        table = self.query_one(DataTable)
        found, broken = st.list_sessions(self.root)
        keep = table.cursor_row
        table.clear()
        for s in found:
            table.add_row(*fmt.session_cells(s), key=s.name)
        if found:
            table.move_cursor(row=min(keep, len(found) - 1), animate=False)
        note = self.query_one("#sessions-note", Static)
        note.update(
            Text("\n".join(f"! {err}" for _, err in broken), style="yellow")
            if broken
            else Text(f"{len(found)} session(s) in {self.root}", style="dim")
        )

    def _selected(self) -> str | None:
        table = self.query_one(DataTable)
        if table.row_count == 0:
            self.notify("no sessions yet: press n to start one")
            return None
        return table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value

    @on(DataTable.RowSelected)
    def row_selected(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        name = self._selected()
        if name:
            self.app.open_live(name)

    def action_resume(self) -> None:
        """A paused session, or one with budget left, resumes as it is; one that spent its
        budget asks how many more trials to run (default: its last budget, at least 32)."""
        name = self._selected()
        if not name:
            return
        try:
            session = st.Session.open(st.resolve_root(self.root, name), name)
            summary = session.summary()
            session.close()
        except UserError as exc:
            self.notify(str(exc), severity="error", timeout=10)
            return
        if summary.status in ("paused", "running", "starting") or summary.trials < summary.budget:
            self.app.resume_session(name)  # it continues to its budget
            return

        def chosen(more: int | None) -> None:
            if more:
                self.app.resume_session(name, more)

        self.app.push_screen(BudgetModal(
            max(32, summary.budget), summary.trials,
            title=f"{name} is {summary.status} with {summary.trials} trials: how many more?"),
            chosen)

    def action_replay(self) -> None:
        name = self._selected()
        if name:
            self.app.open_replay(name)

    def action_export(self) -> None:
        name = self._selected()
        if name:
            self.app.export_session(name)

    def action_new(self) -> None:
        self.app.show_launch()

    def action_delete(self) -> None:
        name = self._selected()
        if not name:
            return

        def answer(yes: bool | None) -> None:
            if not yes:
                return
            try:
                st.remove_session(self.root, name)
                self.notify(f"deleted {name}")
            except UserError as exc:
                self.notify(str(exc), severity="error")
            self.action_refresh()

        self.app.push_screen(ConfirmModal(f"Delete session {name} and its records?"), answer)


# ---- launch ---------------------------------------------------------------------------
class LaunchScreen(Screen):
    BINDINGS = [
        Binding("ctrl+s", "start", "Start"),
        Binding("ctrl+t", "add_tracker", "Add tracker"),
        Binding("f2", "sessions", "Sessions"),
    ]
    TRACKER_REFRESH_S = 5.0

    def compose(self) -> ComposeResult:
        yield Label("New tuning session", classes="screen-title")
        with Horizontal(id="launch"):
            with Vertical(id="launch-left"):
                yield Label("Workload")
                yield OptionList(
                    *[Option(f"{name:10} {spec.short}", id=name) for name, spec in nets.NETS.items()],
                    *[Option(f"{name:10} {spec.short()}", id=name) for name, spec in builtin.OPS.items()],
                    id="workloads",
                )
                yield Static("", id="workload-card")
            with Vertical(id="launch-right"):
                yield Label("Device")
                yield OptionList(id="devices")
                yield Label("Or a model file (.onnx, .tflite)")
                yield Input(placeholder="path/to/model.onnx", id="model-path", compact=True)
                yield Input(placeholder="shapes: x=1x3x224x224", id="shapes", compact=True)
                yield Static("", id="shape-prompt")
                with Horizontal(classes="row"):
                    yield Label("Trials ")
                    yield Input("64", id="trials", type="integer", compact=True)
                    yield Input(placeholder="session name", id="session-name", compact=True)
                yield Label("Baselines to compare")
                yield SelectionList(
                    *[(b, b, b in ("tflite", "onnxruntime")) for b in DEFAULT_BASELINES],
                    id="baselines",
                    compact=True,
                )
                yield Button("Start tuning (Ctrl+S)", id="start", variant="primary", compact=True)
        yield Footer()

    def on_mount(self) -> None:
        devices = self.query_one("#devices", OptionList)
        devices.add_option(Option("local CPU  (asking LLVM...)", id="local"))
        devices.highlighted = 0
        self.detect_device()
        self.refresh_trackers()
        self.set_interval(self.TRACKER_REFRESH_S, self.refresh_trackers)
        workloads = self.query_one("#workloads", OptionList)
        workloads.highlighted = [o.id for o in workloads.options].index("conv:C12")
        workloads.focus()

    @work(thread=True, exclusive=True)
    def detect_device(self) -> None:
        """LLVM's name for this CPU and the CUDA GPUs need TVM: ask once, off the UI thread."""
        from tvmtui.devices.local import local_gpus

        target = self.app.local_target()
        try:
            gpus = local_gpus()
        except Exception:  # noqa: BLE001 - a runtime without CUDA has no GPUs to list
            gpus = []
        self.post_message(self.DeviceFound(target, gpus))

    class DeviceFound(Message):
        """The local CPU's target and the CUDA GPUs (from a thread worker)."""

        def __init__(self, target: dict, gpus: list[dict]) -> None:
            super().__init__()
            self.target, self.gpus = target, gpus

    @on(DeviceFound)
    def show_device(self, found: DeviceFound) -> None:
        target, gpus = found.target, found.gpus
        devices = self.query_one("#devices", OptionList)
        devices.replace_option_prompt("local", f"local CPU  {describe_target(target)}")
        devices.add_options([
            Option(f"GPU {g['name']} sm_{g['compute']}", id=f"cuda:{g['index']}") for g in gpus
        ])

    @work(thread=True, exclusive=True, group="trackers")
    def refresh_trackers(self) -> None:
        """Each saved tracker's keys (total/free/pending), off the UI thread."""
        from tvmtui.devices import rpc
        from tvmtui.devices.trackers import saved_trackers

        rows: list[tuple[str, str, bool]] = []
        for address in saved_trackers():
            host, port = rpc.parse_hostport(address)
            try:
                keys = rpc.tracker_keys(host, port)
            except UserError:
                rows.append((f"dead:{address}", f"tracker {address}: unreachable", True))
                continue
            if not keys:
                rows.append((f"empty:{address}", f"tracker {address}: no servers", True))
            for key, entry in sorted(keys.items()):
                rows.append((f"tracker://{address}/{key}",
                             f"{key} @ {address}: {entry['total']} total, {entry['free']} free, "
                             f"{entry['pending']} pending", entry["total"] == 0))
        self.post_message(self.TrackersRead(rows))

    class TrackersRead(Message):
        """(option id, prompt, disabled) for every tracker key (from a thread worker)."""

        def __init__(self, rows: list[tuple[str, str, bool]]) -> None:
            super().__init__()
            self.rows = rows

    @on(TrackersRead)
    def show_remote(self, read: TrackersRead) -> None:
        rows = read.rows
        devices = self.query_one("#devices", OptionList)
        chosen = devices.highlighted
        keep = [o for o in devices.options if o.id == "local" or o.id.startswith("cuda:")]
        devices.clear_options()
        devices.add_options([*keep, *[Option(p, id=i, disabled=d) for i, p, d in rows]])
        devices.highlighted = chosen if chosen is not None and chosen < devices.option_count else 0

    def action_add_tracker(self) -> None:
        def added(address: str | None) -> None:
            if address:
                self.notify(f"added tracker {address}")
                self.refresh_trackers()

        self.app.push_screen(TrackerModal(), added)

    @on(OptionList.OptionHighlighted, "#workloads")
    def show_card(self, event: OptionList.OptionHighlighted) -> None:
        spec = builtin.OPS.get(event.option.id)
        if spec is None:
            self.query_one("#workload-card", Static).update(f"{event.option.id}: ...")
            self.network_card(event.option.id)
            return
        card = (
            f"{spec.name}: {spec.describe()}\ninput {'x'.join(map(str, spec.input_shape))}, "
            f"{spec.flops / 1e6:.1f} MFLOP, {spec.params:,} weights"
        )
        self.query_one("#workload-card", Static).update(card)

    @work(thread=True, exclusive=True, group="card")
    def network_card(self, name: str) -> None:
        """A network's card may need its files generated first (about a second): off the UI."""
        spec = nets.NETS[name]
        stats = nets.count(spec)
        card = (
            f"{name}: {spec.description}\ninput {'x'.join(map(str, spec.input_shape))}, "
            f"{2 * stats.macs / 1e6:.1f} MFLOP, {stats.params:,} weights, "
            f"{len(stats.layers)} weighted layers"
        )
        self.post_message(self.CardReady(name, card))

    class CardReady(Message):
        """A network's workload card (from a thread worker)."""

        def __init__(self, name: str, card: str) -> None:
            super().__init__()
            self.name, self.card = name, card

    @on(CardReady)
    def set_card(self, ready: CardReady) -> None:
        name, card = ready.name, ready.card
        workloads = self.query_one("#workloads", OptionList)
        if workloads.highlighted is not None and workloads.options[workloads.highlighted].id == name:
            self.query_one("#workload-card", Static).update(card)

    class ModelInputs(Message):
        """What a model file's dynamic inputs need pinned (from a thread worker)."""

        def __init__(self, path: str, suggestions: list[str]) -> None:
            super().__init__()
            self.path, self.suggestions = path, suggestions

    @on(Input.Changed, "#model-path")
    def model_path_changed(self, event: Input.Changed) -> None:
        path = event.value.strip()
        self.query_one("#shape-prompt", Static).display = False
        if path.lower().endswith((".onnx", ".tflite")) and Path(path).is_file():
            self.inspect_model(path)

    @work(thread=True, exclusive=True, group="inspect")
    def inspect_model(self, path: str) -> None:
        """Read the file's input shapes off the UI thread (a large ONNX takes a while)."""
        from tvmtui.workloads.loader import dynamic_inputs

        self.post_message(self.ModelInputs(path, dynamic_inputs(path)))

    @on(ModelInputs)
    def prompt_for_shapes(self, message: ModelInputs) -> None:
        if message.path != self.query_one("#model-path", Input).value.strip():
            return  # the path changed since
        prompt = self.query_one("#shape-prompt", Static)
        prompt.display = bool(message.suggestions)
        if not message.suggestions:
            return
        shapes = self.query_one("#shapes", Input)
        shapes.placeholder = " ".join(message.suggestions)
        names = ", ".join(s.split("=", 1)[0] for s in message.suggestions)
        prompt.update(f"{names}: dynamic shape; enter it above, e.g. "
                      f"{' '.join(message.suggestions)}")

    @on(OptionList.OptionSelected, "#workloads")
    @on(Button.Pressed, "#start")
    @on(Input.Submitted)
    def start_from_widget(self) -> None:
        self.action_start()

    def action_sessions(self) -> None:
        self.app.show_sessions()

    def action_start(self) -> None:
        path = self.query_one("#model-path", Input).value.strip()
        shapes = self.query_one("#shapes", Input).value.split()
        workloads = self.query_one("#workloads", OptionList)
        option = workloads.get_option_at_index(workloads.highlighted or 0)
        spec = path or option.id
        try:
            trials = int(self.query_one("#trials", Input).value or 0)
        except ValueError:
            trials = 0
        name = self.query_one("#session-name", Input).value.strip() or None
        baselines = list(self.query_one("#baselines", SelectionList).selected)
        devices = self.query_one("#devices", OptionList)
        device = devices.get_option_at_index(devices.highlighted or 0).id or "local"
        self.app.start_tuning(spec, shapes, trials, name, baselines, device)


class WorkerExit(Exception):
    """A subprocess the app started failed; its message is for the user."""


def run_cli(args: list[str], root: Path, timeout: float = 3600) -> str:
    """Run a `tvmtui` subcommand in a subprocess (heavy TVM work stays off the UI)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tvmtui", *args, "--sessions-dir", str(root)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise WorkerExit(f"`tvmtui {args[0]}` gave no answer in {timeout:.0f} s and was "
                         "stopped; try it from a terminal to see why") from None
    except OSError as exc:
        raise WorkerExit(f"`tvmtui {args[0]}` could not start: {exc}") from None
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise WorkerExit(lines[-1] if lines else f"exit code {proc.returncode}")
    return proc.stdout

