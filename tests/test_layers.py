"""A float parity miss traced layer by layer: every computed tensor exposed as an output,
run by the baseline's runtime, TVM and the graph in float64; the layer where a side
leaves the tolerance is named, with which side."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tvmtui.baselines.layers import Layer, LayerSides, expose, judge_layers
from tvmtui.workloads import nets
from tvmtui.workloads.litert import make_interpreter


def _cancelling_onnx(path, scale: float) -> None:
    """x -> [x, x] (exact) -> a MatMul whose partial sums are `scale` times its result, so
    float32 keeps few of its digits (whatever the order it sums in) -> Relu."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    k = 257  # odd, as a user's layer may be
    dup = np.concatenate([np.eye(k), np.eye(k)], 1).astype(np.float32)
    w, v = rng.standard_normal((k, 16)), 0.1 * rng.standard_normal((k, 16))
    cancel = np.concatenate([scale * w, -scale * w + v], 0).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "dup"], ["twice"], name="duplicate"),
         helper.make_node("MatMul", ["twice", "cancel"], ["c"], name="cancelling"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "cancelling", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [numpy_helper.from_array(dup, "dup"), numpy_helper.from_array(cancel, "cancel")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_a_miss_is_traced_to_the_layer_that_amplifies_rounding(cli, tmp_path):
    path = tmp_path / "cancelling.onnx"
    _cancelling_onnx(path, 1e4)
    out = cli.run("bench", str(path), "--baselines", "onnxruntime,tvm-untuned", "--json",
                  "--frames", "3", "--repeats", "10", "--warmup", "2", "--max-seconds", "1")
    assert out.returncode == 0, out.stderr
    row = next(b for b in json.loads(out.stdout)["baselines"] if b["name"] == "onnxruntime")
    parity = row["parity"]
    assert parity["passed"] is False and parity["max_rel_err"] > 1e-3, parity
    layers = parity["exact"]["layers"]
    assert [r["name"] for r in layers] == ["duplicate", "cancelling", "relu"], layers
    # The duplication is exact on both sides; the cancelling MatMul is where both leave.
    assert layers[0]["reference_err"] == layers[0]["baseline_err"] == 0.0
    assert min(layers[1]["reference_err"], layers[1]["baseline_err"]) > 1e-4
    assert "layer by layer (3 layers): both leave the tolerance together at operator #1 " \
        "MatMul 'cancelling' (1x16)" in parity["verdict"], parity["verdict"]
    assert "neither kernel is wrong" in parity["verdict"]

    # The same model well conditioned: parity passes, so no trace is run.
    _cancelling_onnx(path, 1.0)
    out = cli.run("bench", str(path), "--baselines", "onnxruntime,tvm-untuned", "--json",
                  "--frames", "3", "--repeats", "10", "--warmup", "2", "--max-seconds", "1")
    row = next(b for b in json.loads(out.stdout)["baselines"] if b["name"] == "onnxruntime")
    assert row["parity"]["passed"] is True and row["parity"]["exact"] is None


def test_exposing_a_tflite_model_keeps_its_outputs_and_adds_every_layer():
    """LiteRT runs the exposed file: its first outputs are the model's own, unchanged, and
    every other is a float tensor an operator computed, in operator order."""
    data = nets.network_files(nets.NETS["dqn"])[1].read_bytes()
    exposed, layers = expose("tflite", data)
    frame = np.random.default_rng(1).random((1, 84, 84, 4), dtype=np.float32)

    def run(model: bytes) -> list[np.ndarray]:
        it = make_interpreter(model, 1)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], frame)
        it.invoke()
        return [it.get_tensor(d["index"]) for d in it.get_output_details()]

    own, every = run(data), run(exposed)
    assert len(every) == len(own) + len(layers) - 1  # the last layer is the model's output
    np.testing.assert_array_equal(every[0], own[0])
    assert [layer.op for layer in layers] == sorted(layer.op for layer in layers)
    assert {layer.kind for layer in layers} >= {"CONV_2D", "FULLY_CONNECTED"}
    for layer in layers:
        assert list(every[layer.position].shape) == layer.shape, layer


@pytest.mark.parametrize("off, expected", [
    ("baseline", "tflite is off from operator #2 CONV_2D 'b' (1x4): 5.0e-03 from exact"),
    ("reference", "tvm-tuned (its graph, built untuned) is off from operator #2"),
])
def test_the_first_layer_past_the_tolerance_names_the_side(off, expected):
    """Both sides exact up to a layer where only one leaves: that side's kernel is named."""
    exact = [np.zeros((1, 4)), np.ones((1, 4))]
    good = [np.zeros((1, 4)), np.ones((1, 4)) + 1e-7]
    bad = [np.zeros((1, 4)), np.ones((1, 4)) + 5e-3]
    sides = LayerSides(
        [Layer(0, 1, "ADD", "a", [1, 4]), Layer(1, 2, "CONV_2D", "b", [1, 4])], exact,
        bad if off == "reference" else good, bad if off == "baseline" else good)
    said, rows = judge_layers(sides, "tvm-tuned", "tflite", 1e-4)
    assert expected in said, said
    assert [r["op"] for r in rows] == [1, 2]


def test_weights_behind_densify_and_dequantize_are_not_layers():
    """A weight stored sparse and float16 (DENSIFY then DEQUANTIZE, as MediaPipe's files
    have them) is folded by the import: neither op's output is exposed as a layer."""
    from .user_models import small_cnn_tflite, with_float16_weights, with_sparse_dense_weight

    plain = small_cnn_tflite()
    stored = with_sparse_dense_weight(with_float16_weights(plain))
    _, layers = expose("tflite", stored)
    assert not {"DENSIFY", "DEQUANTIZE"} & {layer.kind for layer in layers}, layers
    assert [layer.kind for layer in layers] == [layer.kind for layer in expose("tflite", plain)[1]]
