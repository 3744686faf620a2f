"""The launch screen: pick a workload and a device, start tuning."""

from __future__ import annotations

from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import (
    Button,
    Footer,
    Input,
    Label,
    OptionList,
    SelectionList,
    Static,
)
from textual.widgets.option_list import Option

from tvmtui.baselines.runners import DEFAULT as DEFAULT_BASELINES
from tvmtui.baselines.runners import cannot_run_here
from tvmtui.core.errors import UserError
from tvmtui.devices.local import describe_target
from tvmtui.tui.screens.modals import TrackerModal
from tvmtui.tui.studio import studio
from tvmtui.workloads import builtin, int8, nets


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
                    *[Option(f"{name:10} {nets.NETS[net].short}, int8", id=name)
                      for name, net in int8.INT8_TWINS.items()],
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
                    yield Label("or min ")
                    yield Input(placeholder="none", id="minutes", type="number", compact=True)
                    yield Input(placeholder="session name", id="session-name", compact=True)
                yield Label("Baselines to compare")
                yield SelectionList(*_baseline_choices(), id="baselines", compact=True)
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

        target = studio(self).local_target()
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
        keep = [o for o in devices.options if o.id == "local" or (o.id or "").startswith("cuda:")]
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
        spec = builtin.OPS.get(event.option.id or "")
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
        spec = nets.NETS[int8.INT8_TWINS.get(name, name)]
        stats = nets.count(spec)
        what = int8.describe(name) if name in int8.INT8_TWINS else spec.description
        card = (
            f"{name}: {what}\ninput {'x'.join(map(str, spec.input_shape))}, "
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
        studio(self).show_sessions()

    def action_start(self) -> None:
        path = self.query_one("#model-path", Input).value.strip()
        shapes = self.query_one("#shapes", Input).value.split()
        workloads = self.query_one("#workloads", OptionList)
        option = workloads.get_option_at_index(workloads.highlighted or 0)
        spec = path or option.id or ""
        try:
            trials = int(self.query_one("#trials", Input).value or 0)
        except ValueError:
            trials = 0
        minutes_text = self.query_one("#minutes", Input).value.strip()
        try:
            minutes = float(minutes_text) if minutes_text else None
        except ValueError:
            self.notify(f"minutes: {minutes_text!r} is not a number of minutes", severity="error")
            return
        name = self.query_one("#session-name", Input).value.strip() or None
        baselines = list(self.query_one("#baselines", SelectionList).selected)
        devices = self.query_one("#devices", OptionList)
        device = devices.get_option_at_index(devices.highlighted or 0).id or "local"
        studio(self).start_tuning(spec, shapes, trials, name, baselines, device, minutes)


def _baseline_choices() -> list[tuple[str, str, bool]]:
    """(label, baseline, ticked): LiteRT and ONNX Runtime ticked; one that cannot run on
    this machine (ACL off Arm) unticked, with why."""
    out = []
    for name in DEFAULT_BASELINES:
        reason = cannot_run_here(name, {})
        why = "Arm CPUs only" if reason and "Arm CPUs only" in reason else "not found here"
        label = name if reason is None else f"{name} ({why})"
        out.append((label, name, reason is None and name in ("tflite", "onnxruntime")))
    return out
