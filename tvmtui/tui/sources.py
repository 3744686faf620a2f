"""Where the live screen's events come from: a running session, or a replay of a saved one.

Both are polled from a timer on the UI side; a poll is a quick SQLite read (or a slice of
a list), never TVM work, and returns a bounded number of events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tvmtui.core import events as ev
from tvmtui.sessions import store as st

MAX_EVENTS_PER_POLL = 2000


@dataclass
class PollResult:
    events: list[dict]
    status: str  # the session's status as the source sees it


class LiveSource:
    """Follows a session in the store; controls go to its worker through the store."""

    live = True

    def __init__(self, root, name: str):
        self.root = root
        self.name = name
        self.session = st.Session.open(root, name)
        self.meta = self.session.meta()  # read once: device, target, options
        self.seq = 0

    def poll(self) -> PollResult:
        new = self.session.events(self.seq, limit=MAX_EVENTS_PER_POLL)
        if new:
            self.seq = new[-1]["seq"]
        return PollResult(new, self.session.status())

    def worker_alive(self) -> bool:
        return self.session.worker_alive()

    def send(self, command: str, arg=None) -> None:
        self.session.send(command, arg)

    def trace(self, trial: int) -> str | None:
        return self.session.trace(trial)

    def close(self) -> None:
        self.session.close()


class ReplaySource:
    """Plays a saved session's events back at `speed` x real time, with pause and step.

    Idle gaps longer than `max_gap_s` (of session time) are shortened to it, so a replay
    of a session that was paused overnight does not sit still.
    """

    live = False

    def __init__(self, root, name: str, speed: float = 10.0, max_gap_s: float = 5.0):
        self.session = st.Session.open(root, name)
        self.meta = self.session.meta()
        self.name = name
        self.events = self.session.events(0)
        self.speed = speed
        self.playing = True
        self.index = 0
        self.clock = 0.0  # session seconds played so far
        self._times = self._compress([e["t"] for e in self.events], max_gap_s)
        self._last_wall = time.monotonic()

    @staticmethod
    def _compress(times: list[float], max_gap: float) -> list[float]:
        out, now, prev = [], 0.0, None
        for t in times:
            if prev is not None:
                now += min(max(t - prev, 0.0), max_gap)
            out.append(now)
            prev = t
        return out

    @property
    def finished(self) -> bool:
        return self.index >= len(self.events)

    def poll(self) -> PollResult:
        wall = time.monotonic()
        if self.playing:
            self.clock += (wall - self._last_wall) * self.speed
        self._last_wall = wall
        end = self.index
        while end < len(self.events) and self._times[end] <= self.clock:
            end += 1
        end = min(end, self.index + MAX_EVENTS_PER_POLL)
        out = self.events[self.index : end]
        self.index = end
        return PollResult(out, "replay" if not self.finished else "replayed")

    def step(self) -> None:
        """Jump to the end of the next measured round (or the next event)."""
        end = self.index
        while end < len(self.events):
            end += 1
            if self.events[end - 1]["event"] in (ev.ROUND_DONE, ev.STATE):
                break
        if end > self.index:
            self.clock = self._times[end - 1]

    def toggle(self) -> None:
        self.playing = not self.playing

    def faster(self) -> None:
        self.speed = min(self.speed * 2, 1000.0)

    def slower(self) -> None:
        self.speed = max(self.speed / 2, 0.25)

    def worker_alive(self) -> bool:
        return False

    def trace(self, trial: int) -> str | None:
        return self.session.trace(trial)

    def close(self) -> None:
        self.session.close()
