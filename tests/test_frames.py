"""Seeded parity frames in the range each input expects."""

from __future__ import annotations

import numpy as np

from tests.user_models import shape_reshape_onnx, small_cnn_tflite
from tvmtui.baselines.frames import describe, input_ranges, seeded_frames
from tvmtui.baselines.model import bench_model
from tvmtui.workloads.quantize import quantize_tflite


def _model(fmt: str, data: bytes, shapes: dict):
    return bench_model({"name": "m", "format": fmt, "input_shapes": shapes}, data)


def test_an_image_gets_zero_to_one_other_float_inputs_a_standard_normal():
    image = _model("tflite", small_cnn_tflite(), {"input": [1, 10, 10, 4]})
    assert describe(image) == "input: uniform [0, 1] (an image)"
    frames = seeded_frames(image, 3)
    assert all(0.0 <= f[0].min() and f[0].max() <= 1.0 for f in frames)
    assert frames[0][0].std() > 0.2  # spread over the range, not a constant
    features = _model("onnx", shape_reshape_onnx(), {"input": [1, 4, 9, 7]})
    assert input_ranges(features)["input"].low is None
    assert seeded_frames(features, 1)[0][0].min() < 0


def test_a_quantized_input_is_drawn_over_what_its_quantize_holds():
    data = small_cnn_tflite()
    calibration = [np.random.default_rng(i).uniform(-0.5, 2.0, (1, 10, 10, 4)).astype(np.float32)
                   for i in range(4)]
    model = _model("tflite", quantize_tflite(data, calibration), {"input": [1, 10, 10, 4]})
    held = input_ranges(model)["input"]
    assert held.why == "what its QUANTIZE holds"
    assert -0.6 < held.low < -0.4 and 1.9 < held.high < 2.1, held
    frame = seeded_frames(model, 1)[0][0]
    assert held.low <= frame.min() < 0 and 1.0 < frame.max() <= held.high
