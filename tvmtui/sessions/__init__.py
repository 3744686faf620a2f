"""Saved tuning sessions: the store every reader and the worker share."""

from tvmtui.sessions.catalog import list_sessions
from tvmtui.sessions.store import Session, SessionSummary

__all__ = ["Session", "SessionSummary", "list_sessions"]
