"""Screens of the app: launch, live tuning (or replay), saved sessions, and small modals."""

from tvmtui.tui.screens.commands import WorkerExit, run_cli
from tvmtui.tui.screens.launch import LaunchScreen
from tvmtui.tui.screens.live import BenchDone, LiveScreen
from tvmtui.tui.screens.modals import BudgetModal, ConfirmModal, MessageModal, TrackerModal
from tvmtui.tui.screens.sessions import SessionsScreen

__all__ = ["BenchDone", "BudgetModal", "ConfirmModal", "LaunchScreen", "LiveScreen",
           "MessageModal", "SessionsScreen", "TrackerModal", "WorkerExit", "run_cli"]
