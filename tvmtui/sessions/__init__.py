"""Saved tuning sessions: the store every reader and the worker share."""

from tvmtui.sessions.catalog import list_sessions
from tvmtui.sessions.store import Session, SessionSummary, sessions_root

__all__ = ["Session", "SessionSummary", "list_sessions", "sessions_root"]
