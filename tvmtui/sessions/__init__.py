"""Saved tuning sessions: the store every reader and the worker share."""

from tvmtui.sessions.store import Session, SessionSummary, list_sessions, sessions_root

__all__ = ["Session", "SessionSummary", "list_sessions", "sessions_root"]
