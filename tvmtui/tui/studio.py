"""What the screens ask of the app: the `Studio` protocol `TvmTuiApp` implements. Screens
reach it through `studio(self)` rather than importing the app, which imports them."""

from __future__ import annotations

from typing import Any, Protocol, cast

from textual.dom import DOMNode


class Studio(Protocol):
    def show_launch(self) -> None: ...

    def show_sessions(self) -> None: ...

    def open_live(self, name: str) -> None: ...

    def open_replay(self, name: str, speed: float | None = None) -> None: ...

    def local_target(self) -> dict: ...

    def start_tuning(self, spec: str, shapes: list[str], trials: int, name: str | None,
                     baselines: list[str], device: str = "local",
                     minutes: float | None = None) -> Any: ...

    def resume_session(self, name: str, more: int | None = None) -> None: ...

    def export_session(self, name: str) -> None: ...

    def run_bench(self, name: str, screen) -> Any: ...


def studio(node: DOMNode) -> Studio:
    """The running app, as the screens may use it."""
    return cast(Studio, node.app)
