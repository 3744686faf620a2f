"""Requests from other processes to a running worker (pause, resume, stop, a new budget),
read from the session's control table by a thread that also beats the heartbeat."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tvmtui.core import events as ev
from tvmtui.sessions import store as st

log = logging.getLogger("tvmtui.worker")


@dataclass
class Control:
    """Requests from other processes, shared between the control thread and the tuner."""

    budget: int
    stop: bool = False
    stop_reason: str = ""
    device_lost: bool = False  # the stop was the board (or its tracker) no longer answering
    paused: bool = False
    deadline: float | None = None  # time.time() at which this run stops searching (--minutes)
    wake: threading.Condition = field(default_factory=threading.Condition)

    def out_of_time(self) -> bool:
        """This run's time budget is spent: no new search round starts, the one under way
        ends at its next batch."""
        return self.deadline is not None and time.time() >= self.deadline

    def set(self, **values) -> None:
        with self.wake:
            for key, value in values.items():
                setattr(self, key, value)
            self.wake.notify_all()


class ControlThread(threading.Thread):
    """Polls the session's control table and beats a heartbeat into its metadata."""

    def __init__(self, session_path: Path, control: Control, after: int):
        super().__init__(daemon=True, name="tvmtui-control")
        self.session = st.Session.open(session_path.parent, session_path.name)
        self.control = control
        self.after = after
        self.done = threading.Event()

    def run(self) -> None:
        last_beat = 0.0
        while not self.done.wait(0.25):
            try:
                for cid, command, arg in self.session.commands(self.after):
                    self.after = cid
                    self.apply(command, arg)
                now = time.time()
                if now - last_beat >= 2.0:
                    self.session.set_meta(heartbeat=now)
                    last_beat = now
            except Exception:  # noqa: BLE001 - a busy database must not kill the worker
                log.exception("control thread")

    def apply(self, command: str, arg) -> None:
        c = self.control
        if command == "pause":
            c.set(paused=True)
        elif command == "resume":
            c.set(paused=False)
        elif command == "stop":
            c.set(stop=True, stop_reason=arg or "stopped by user", paused=False)
        elif command == "minutes":  # a new time budget, counted from now (0: none)
            minutes = float(arg)
            c.set(deadline=time.time() + 60.0 * minutes if minutes else None)
            self.session.append(ev.NOTICE, {
                "message": (f"time budget: searching stops {minutes:g} min from now"
                            if minutes else "time budget removed"),
                "deadline": c.deadline})
        elif command == "budget":
            c.set(budget=int(arg))
            self.session.set_meta(budget=int(arg))
