"""The zoo's int8 twins: MobileNet, ResNet-18 and DQN quantized from their float TFLite files.

Calibrated on 16 seeded frames of the distribution the bench feeds (standard normal);
written with the same schema writer as every generated file, so int8 is tested without
a model download, and each also as an ONNX QDQ file with the same integers (`qdq.py`) for
ONNX Runtime and OpenVINO. Cached beside the float files, keyed by the generator's sources.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from tvmtui.workloads import nets

# twin -> float network
INT8_TWINS = {"mobilenet-int8": "mobilenet", "resnet18-int8": "resnet18", "dqn-int8": "dqn"}
CALIBRATION_FRAMES = 16


def twin_file(name: str) -> Path:
    """The int8 twin's `.tflite`, generated once per generator version."""
    spec = nets.NETS[INT8_TWINS[name]]
    here = Path(__file__).parent
    key = hashlib.sha256((here / "quantize.py").read_bytes() + (here / "int8.py").read_bytes())
    path = nets.network_files(spec)[1].with_name(f"{name}-{key.hexdigest()[:8]}.tflite")
    if not path.exists():
        from tvmtui.workloads.quantize import quantize_tflite

        n, c, h, w = spec.input_shape
        frames = [np.random.default_rng(i).standard_normal((n, h, w, c)).astype(np.float32)
                  for i in range(CALIBRATION_FRAMES)]
        data = quantize_tflite(nets.network_files(spec)[1].read_bytes(), frames)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path


def qdq_file(name: str) -> Path:
    """The int8 twin as ONNX QDQ (NCHW), written from its `.tflite`, generated once."""
    here = Path(__file__).parent
    tflite = twin_file(name)
    key = hashlib.sha256(tflite.read_bytes() + (here / "qdq.py").read_bytes())
    path = tflite.with_name(f"{name}-qdq-{key.hexdigest()[:8]}.onnx")
    if not path.exists():
        from tvmtui.workloads.qdq import tflite_to_qdq

        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_bytes(tflite_to_qdq(tflite.read_bytes()))
        os.replace(tmp, path)
    return path


def describe(name: str) -> str:
    float_spec = nets.NETS[INT8_TWINS[name]]
    return f"{float_spec.description}, int8 (per-channel weights, calibrated)"
