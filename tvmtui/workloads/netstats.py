"""What a generated network holds, tallied as its layers are written (ONNX and TFLite
writers alike)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class NetStats:
    macs: int = 0
    params: int = 0
    layers: list[str] = field(default_factory=list)
