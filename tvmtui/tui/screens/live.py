"""The live screen: one session's tuning (or its replay), tabs of trials, tasks, boards and baselines."""

from __future__ import annotations

import time
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import (
    DataTable,
    Footer,
    Static,
    TabbedContent,
    TabPane,
)

from tvmtui.sessions import store as st
from tvmtui.sessions.view import SessionView, variants_line
from tvmtui.tui.screens.modals import BudgetModal, ConfirmModal, MessageModal
from tvmtui.tui.sources import LiveSource, ReplaySource
from tvmtui.tui.studio import studio
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

REFRESH_HZ = 4  # the live screen polls and repaints at most this often


CHART_EVERY = 4  # charts redraw once per this many ticks (plotext is the slow part)


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
        if isinstance(self.source, ReplaySource):
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

    def _live_only(self) -> LiveSource | None:
        """The source, when a worker is running it; else None, and the user is told why."""
        if not isinstance(self.source, LiveSource):
            self.notify("this is a replay: space plays/pauses, n steps, [ ] change speed")
            return None
        if not self.source.worker_alive():
            self.notify(
                f"no worker is running {self.source.name}; resume it from Sessions (r)",
                severity="warning",
            )
            return None
        return self.source

    def action_pause(self) -> None:
        if not (source := self._live_only()):
            return
        if self.view.state == "paused":
            source.send("resume")
            self.notify("resuming")
        else:
            source.send("pause")
            self.notify("pausing after the current batch")

    def action_stop(self) -> None:
        if not (source := self._live_only()):
            return

        def answer(yes: bool | None) -> None:
            if yes:
                source.send("stop", "stopped from the app")
                self.notify("stopping after the current batch")

        self.app.push_screen(ConfirmModal(f"Stop tuning {self.source.name}?"), answer)

    def action_budget(self) -> None:
        if not (source := self._live_only()):
            return

        def answer(value: int | None) -> None:
            if value is not None:
                source.send("budget", value)
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
        studio(self).run_bench(self.source.name, self)

    def on_bench_done(self, done: BenchDone) -> None:
        self.bench_since = None
        self.dirty = True
        self.notify(done.text, severity="error" if done.error else "information", timeout=10)

    def action_export(self) -> None:
        if not self.source.live:
            self.notify("export a session from Sessions (e)")
            return
        studio(self).export_session(self.source.name)

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_replay_toggle(self) -> None:
        if isinstance(self.source, ReplaySource):
            self.source.toggle()
            self._render_summary()

    def action_replay_step(self) -> None:
        if isinstance(self.source, ReplaySource):
            self.source.step()
            self.tick()

    def action_replay_faster(self) -> None:
        if isinstance(self.source, ReplaySource):
            self.source.faster()
            self._render_summary()

    def action_replay_slower(self) -> None:
        if isinstance(self.source, ReplaySource):
            self.source.slower()
            self._render_summary()

    def action_leave(self) -> None:
        studio(self).show_sessions()

    @on(DataTable.RowSelected, "#trial-stream")
    def drill_into_trial(self, event: DataTable.RowSelected) -> None:
        trial = int(event.row_key.value or -1)
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

