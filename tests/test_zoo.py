"""The TVM paper's five networks, generated in code: figures, validity, TVM vs ONNX Runtime."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tvmtui.workloads import load_workload
from tvmtui.workloads.nets import NETS, build_onnx_net


def test_published_figures():
    _, resnet = build_onnx_net(NETS["resnet18"])
    _, mobilenet = build_onnx_net(NETS["mobilenet"])
    _, dqn = build_onnx_net(NETS["dqn"])
    assert abs(resnet.macs / 1.814e9 - 1) < 0.01  # ResNet-18: 1.8 GMACs
    assert abs(mobilenet.macs / 569e6 - 1) < 0.01  # MobileNet v1 1.0-224: 569 MMACs
    assert abs(dqn.params / 1.69e6 - 1) < 0.01  # Nature DQN: 1.69 M parameters


@pytest.mark.parametrize("name", list(NETS))
def test_network_is_valid_onnx_and_tvm_matches_onnxruntime(name):
    import onnxruntime as ort
    import tvm
    from tvm import relax

    from tvmtui.graph.relax_import import onnx_to_relax

    workload = load_workload(name)
    model = onnx.load_from_string(workload.model_bytes)
    onnx.checker.check_model(model, full_check=True)
    assert load_workload(name).graph_hash == workload.graph_hash  # seeded: same bytes
    shape = workload.input_shapes["input"]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    expected = ort.InferenceSession(
        workload.model_bytes, providers=["CPUExecutionProvider"]
    ).run(None, {"input": x})[0]
    mod = onnx_to_relax(workload.model_bytes, workload.input_shapes)
    vm = relax.VirtualMachine(relax.build(mod, target=tvm.target.Target({"kind": "llvm"})), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_zoo_cli(cli, tmp_path):
    listed = json.loads(cli.run("zoo", "list", "--json").stdout)
    names = [row["name"] for row in listed]
    assert names[:5] == ["resnet18", "mobilenet", "lstm", "dqn", "dcgan"]
    assert "conv:C12" in names and "dwconv:D9" in names
    assert all({"name", "kind", "flops", "params"} <= row.keys() for row in listed)
    card = json.loads(cli.run("zoo", "show", "dqn", "--json").stdout)
    assert card["tasks"] >= 4 and card["params"] == next(r for r in listed if r["name"] == "dqn")["params"]
    exported = json.loads(cli.run("zoo", "export", "dcgan", str(tmp_path), "--json").stdout)
    assert onnx.load(exported["onnx"]).graph.node
    bad = cli.run("zoo", "show", "resnet50")
    assert bad.returncode == 2 and "unknown workload" in bad.stderr


def test_tune_dqn_end_to_end_and_the_library_matches_onnxruntime(cli, tmp_path):
    import onnxruntime as ort

    from tests.test_tuning import _run_module

    result = cli.run("tune", "dqn", "--trials", "32", "--session", "dqn", "--json")
    assert result.returncode == 0, result.stderr
    events = cli.json_lines(result.stdout)
    assert len([e for e in events if e["event"] == "trial"]) == 32
    assert events[-1]["state"] == "finished" and events[-1]["best_ms"] > 0
    exported = cli.run("export", "dqn", str(tmp_path / "dqn.so"))
    assert exported.returncode == 0, exported.stderr
    from tvmtui.workloads.nets import network_files

    workload = load_workload("dqn")
    x = np.random.default_rng(2).standard_normal((1, 4, 84, 84)).astype(np.float32)
    got = _run_module(str(tmp_path / "dqn.so"), x)
    expected = ort.InferenceSession(
        workload.model_bytes, providers=["CPUExecutionProvider"]
    ).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
    lite = _litert(network_files(NETS["dqn"])[1].read_bytes(), _nhwc(x))
    np.testing.assert_allclose(got, lite, atol=1e-4, rtol=1e-4)


def _litert(model: bytes, x: np.ndarray) -> np.ndarray:
    from tvmtui.workloads.litert import make_interpreter

    interp = make_interpreter(model)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], np.ascontiguousarray(x))
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"])


def _nhwc(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 2, 3, 1) if x.ndim == 4 else x


def _nchw(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 3, 1, 2) if x.ndim == 4 else x


@pytest.mark.parametrize("name", list(NETS))
def test_twins_agree_onnxruntime_litert_and_tvm_from_tflite(name):
    """Same seeded weights in both files: ONNX Runtime, LiteRT and TVM (built from the
    .tflite) agree within 1e-4 after the NCHW/NHWC transposes."""
    import onnxruntime as ort
    import tvm
    from tvm import relax

    from tvmtui.graph.relax_import import tflite_to_relax
    from tvmtui.workloads.nets import build_tflite_net

    spec = NETS[name]
    onnx_model, onnx_stats = build_onnx_net(spec)
    tfl, tfl_stats = build_tflite_net(spec)
    assert (onnx_stats.macs, onnx_stats.params) == (tfl_stats.macs, tfl_stats.params)
    x = np.random.default_rng(4).standard_normal(spec.input_shape).astype(np.float32)
    expected = ort.InferenceSession(
        onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"input": x})[0]
    lite = _nchw(_litert(tfl, _nhwc(x)))
    shapes = {"input": list(_nhwc(x).shape)}
    vm = relax.VirtualMachine(
        relax.build(tflite_to_relax(tfl, shapes), target=tvm.target.Target({"kind": "llvm"})),
        tvm.cpu(),
    )
    from_tflite = _nchw(vm["main"](tvm.runtime.tensor(_nhwc(x))).numpy())
    worst = max(float(np.abs(lite - expected).max()), float(np.abs(from_tflite - expected).max()))
    assert worst <= 1e-4, worst


def test_tune_generated_dcgan_tflite_and_the_library_matches_litert(cli, tmp_path):
    from tests.test_tuning import _run_module

    out = json.loads(cli.run("zoo", "export", "dcgan", str(tmp_path), "--json").stdout)
    result = cli.run("tune", out["tflite"], "--trials", "16", "--session", "g", "--json")
    assert result.returncode == 0, result.stderr
    assert len([e for e in cli.json_lines(result.stdout) if e["event"] == "trial"]) == 16
    exported = cli.run("export", "g", str(tmp_path / "g.so"))
    assert exported.returncode == 0, exported.stderr
    x = np.random.default_rng(5).standard_normal((1, 100)).astype(np.float32)
    expected = _litert(open(out["tflite"], "rb").read(), x)
    np.testing.assert_allclose(_run_module(str(tmp_path / "g.so"), x), expected, atol=1e-4, rtol=1e-4)


def test_bad_tflite_files_are_one_line_errors(cli, tmp_path):
    from tvmtui.workloads.tflite_writer import TfliteNet

    out = json.loads(cli.run("zoo", "export", "dqn", str(tmp_path), "--json").stdout)
    data = open(out["tflite"], "rb").read()
    truncated = tmp_path / "truncated.tflite"
    truncated.write_bytes(data[:5000])
    result = cli.run("tune", str(truncated))
    assert result.returncode == 2 and "not a readable TFLite model" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

    net = TfliteNet("odd", [1, 8])
    odd = net._op("LSH_PROJECTION", ["input"], [1, 8])
    unsupported = tmp_path / "unsupported.tflite"
    unsupported.write_bytes(net.finish(odd))
    result = cli.run("tune", str(unsupported))
    assert result.returncode == 2
    assert "cannot import: LSH_PROJECTION (operator #0 -> tensor lsh_projection_1)" in result.stderr
    assert not cli.root.exists() or not any(cli.root.iterdir())
