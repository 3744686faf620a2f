"""The saved-sessions screen: list, open, resume, replay, remove."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import (
    DataTable,
    Footer,
    Label,
    Static,
)

from tvmtui import fmt
from tvmtui.core.errors import UserError
from tvmtui.sessions import catalog
from tvmtui.sessions import store as st
from tvmtui.tui.screens.modals import BudgetModal, ConfirmModal
from tvmtui.tui.studio import studio


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
        found, broken = catalog.list_sessions(self.root)
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
        return table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value

    @on(DataTable.RowSelected)
    def row_selected(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        name = self._selected()
        if name:
            studio(self).open_live(name)

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
            studio(self).resume_session(name)  # it continues to its budget
            return

        def chosen(more: int | None) -> None:
            if more:
                studio(self).resume_session(name, more)

        self.app.push_screen(BudgetModal(
            max(32, summary.budget), summary.trials,
            title=f"{name} is {summary.status} with {summary.trials} trials: how many more?"),
            chosen)

    def action_replay(self) -> None:
        name = self._selected()
        if name:
            studio(self).open_replay(name)

    def action_export(self) -> None:
        name = self._selected()
        if name:
            studio(self).export_session(name)

    def action_new(self) -> None:
        studio(self).show_launch()

    def action_delete(self) -> None:
        name = self._selected()
        if not name:
            return

        def answer(yes: bool | None) -> None:
            if not yes:
                return
            try:
                catalog.remove_session(self.root, name)
                self.notify(f"deleted {name}")
            except UserError as exc:
                self.notify(str(exc), severity="error")
            self.action_refresh()

        self.app.push_screen(ConfirmModal(f"Delete session {name} and its records?"), answer)

