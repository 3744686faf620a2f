"""The int8 twins as ONNX QDQ (`workloads/qdq.py`): ONNX Runtime runs them on its integer
kernels, within the quantized gate of LiteRT's reference kernels, on small odd shapes."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from tvmtui.baselines.parity import QUANT_STEPS
from tvmtui.workloads.qdq import UnsupportedTwin, tflite_to_qdq

from .test_integer import CASES, _int8, _output_step, _reference


def _ort(model: bytes, optimized=None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    if optimized is not None:
        so.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _steps_and_ops(model: bytes, tmp_path, frames: int = 8) -> tuple[int, collections.Counter]:
    """ONNX Runtime on the QDQ twin against LiteRT's reference kernels on the `.tflite`:
    the largest output difference in steps, and the operators ONNX Runtime ran."""
    import onnx

    qdq = tflite_to_qdq(model)
    onnx.checker.check_model(onnx.load_from_string(qdq))
    sess = _ort(qdq, tmp_path / "optimized.onnx")
    it = _reference(model)
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    step = _output_step(it)
    worst = 0
    for i in range(frames):
        x = np.random.default_rng(200 + i).standard_normal(inp["shape"]).astype(np.float32)
        it.set_tensor(inp["index"], x)
        it.invoke()
        want = it.get_tensor(out["index"])
        nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        got = sess.run(None, {sess.get_inputs()[0].name: nchw})[0]
        if got.ndim == 4:
            got = got.transpose(0, 2, 3, 1)
        assert got.shape == want.shape
        worst = max(worst, int(np.rint(np.abs(got - want).max() / step)))
    ran = collections.Counter(n.op_type for n in onnx.load(tmp_path / "optimized.onnx").graph.node)
    return worst, ran


@pytest.mark.parametrize("case", CASES)
def test_onnxruntime_runs_the_qdq_twin_on_integers(case, tmp_path):
    layers, shape = CASES[case]
    model = _int8(layers, shape)
    steps, ran = _steps_and_ops(model, tmp_path)
    assert steps <= QUANT_STEPS, (case, steps)
    if case == "residual-add-relu":
        # ONNX Runtime (1.32) keeps a convolution float when an int8 ADD reads it, as it
        # does on the file its own static quantizer writes for ResNet-18 (11 of 20 float)
        assert ran["Conv"] == 2, ran
        return
    # the weighted layers became ONNX Runtime's integer operators, none is left float
    assert ran["QLinearConv"] + ran["QGemm"] >= 1 and ran["Conv"] == 0 and ran["Gemm"] == 0, ran


def test_per_tensor_weights_too(tmp_path):
    layers, shape = CASES["conv3x3s2-3to13-bn-relu"]
    steps, ran = _steps_and_ops(_int8(layers, shape, per_channel=False), tmp_path)
    assert steps <= QUANT_STEPS and ran["QLinearConv"] == 1, ran


def test_zoo_twin_qdq_file_is_cached_and_runs(tmp_path):
    from tvmtui.workloads.int8 import qdq_file, twin_file

    path = qdq_file("dqn-int8")
    assert path == qdq_file("dqn-int8") and path.suffix == ".onnx"
    steps, ran = _steps_and_ops(twin_file("dqn-int8").read_bytes(), tmp_path, frames=4)
    assert steps <= QUANT_STEPS
    assert ran["QLinearConv"] == 3 and ran["QGemm"] == 2, ran


def test_an_operator_without_a_qdq_form_is_named():
    from tvmtui.workloads import nets
    from tvmtui.workloads.quantize import quantize_tflite
    from tvmtui.workloads.tflite_writer import TfliteNet

    net = TfliteNet("t", [1, 4, 6, 6])
    y = net.conv("input", nets._he(np.random.default_rng(0), (4, 4, 1, 1), 4), None, 1, 0)
    model = quantize_tflite(net.finish(net.sigmoid(y)),
                            [np.random.default_rng(i).standard_normal((1, 6, 6, 4))
                             .astype(np.float32) for i in range(4)])
    with pytest.raises(UnsupportedTwin, match="LOGISTIC"):
        tflite_to_qdq(model)
