"""Small modal screens: a message, a yes/no question, a new trial budget, a tracker address."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import (
    Input,
    Label,
    Static,
)

from tvmtui.core.errors import UserError


class MessageModal(ModalScreen[None]):
    """A titled block of text (an error, a trial's trace, help)."""

    BINDINGS = [Binding("escape,q,enter", "close", "Close")]

    def __init__(self, title: str, body: str):
        super().__init__()
        self.title_text, self.body = title, body

    def compose(self) -> ComposeResult:
        with Vertical(id="modal"):
            yield Label(self.title_text, id="modal-title")
            with VerticalScroll():
                yield Static(Text(self.body), id="modal-body")
            yield Label("Esc closes", classes="hint")

    def action_close(self) -> None:
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

