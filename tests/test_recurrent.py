"""Recurrent operators written out in the import layer: ONNX LSTM / GRU / RNN against ONNX
Runtime, TFLite sequence LSTMs against LiteRT's reference kernels, and both through the
product (tune, bench with parity)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest

from tests.recurrent_models import onnx_recurrent, tflite_sequence_lstm
from tvmtui.core.errors import UserError
from tvmtui.graph.recurrent import RECURRENT, expand_recurrent
from tvmtui.graph.relax_import import load_relax
from tvmtui.workloads.loader import load_workload, unsupported_onnx_ops

ONNX_CASES = {
    "lstm": dict(kind="LSTM"),
    "lstm-reverse-odd": dict(kind="LSTM", direction="reverse", hidden=9, inputs=3),
    "lstm-bidirectional-states": dict(kind="LSTM", direction="bidirectional", initial=True),
    "lstm-peepholes": dict(kind="LSTM", peepholes=True, initial=True),
    "lstm-lengths": dict(kind="LSTM", direction="bidirectional", lens=True),
    "lstm-clip-no-bias": dict(kind="LSTM", clip=0.7, bias=False),
    "lstm-coupled": dict(kind="LSTM", input_forget=1),
    "lstm-batch-first": dict(kind="LSTM", layout=1, direction="bidirectional", initial=True),
    "lstm-one-step": dict(kind="LSTM", seq=1, batch=1, hidden=3),
    "lstm-opset9-hardsigmoid": dict(kind="LSTM", opset=9, activations=["HardSigmoid", "Tanh", "Tanh"],
                                    activation_alpha=[0.25], activation_beta=[0.45]),
    "gru": dict(kind="GRU", hidden=11),
    "gru-linear-before-reset": dict(kind="GRU", linear_before_reset=1, initial=True,
                                    direction="bidirectional"),
    "gru-reverse-lengths": dict(kind="GRU", direction="reverse", initial=True, lens=True),
    "gru-batch-first": dict(kind="GRU", layout=1, linear_before_reset=1),
    "gru-leaky": dict(kind="GRU", activations=["HardSigmoid", "LeakyRelu"],
                      activation_alpha=[0.3, 0.2], activation_beta=[0.4]),
    "rnn": dict(kind="RNN"),
    "rnn-bidirectional-lengths": dict(kind="RNN", direction="bidirectional", initial=True,
                                      lens=True),
    "rnn-relu": dict(kind="RNN", activations=["Relu"]),
}


def _feeds(case: dict, layout: int, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    seq, batch, inputs = case.get("seq", 5), case.get("batch", 2), case.get("inputs", 7)
    dirs = 2 if case.get("direction") == "bidirectional" else 1
    hidden = case.get("hidden", 5)
    x = rng.standard_normal((seq, batch, inputs)).astype(np.float32)
    feeds = {"X": x.transpose(1, 0, 2) if layout else x}
    if case.get("lens"):
        feeds["L"] = np.array([seq, max(1, seq - 2)][:batch], np.int32)
    if case.get("initial"):
        for state in ("H0", "C0") if case["kind"] == "LSTM" else ("H0",):
            s = rng.standard_normal((dirs, batch, hidden)).astype(np.float32)
            feeds[state] = s.transpose(1, 0, 2) if layout else s
    return feeds


def _onnx_runtime(model: bytes, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _reference(case: dict) -> list[np.ndarray]:
    """ONNX Runtime on the node as written (batch-first layouts, which it does not run,
    through the same weights in sequence-first layout)."""
    layout = case.get("layout", 0)
    model = onnx_recurrent(**dict(case, layout=0))
    outs = _onnx_runtime(model, _feeds(case, 0))
    if not layout:
        return outs
    return [o.transpose(2, 0, 1, 3) if o.ndim == 4 else o.transpose(1, 0, 2) for o in outs]


@pytest.mark.parametrize("name", list(ONNX_CASES))
def test_onnx_recurrent_nodes_are_written_out_exactly(name):
    """The written-out graph, run by ONNX Runtime, gives the node's outputs; it holds only
    operators TVM's frontend imports."""
    case = ONNX_CASES[name]
    model = onnx.load_from_string(onnx_recurrent(**case))
    expanded = expand_recurrent(model)
    onnx.checker.check_model(expanded)
    # No Gather: MetaSchedule's runner fills an index tensor with random values and crashes.
    assert not {n.op_type for n in expanded.graph.node} & {*RECURRENT, "Gather"}
    assert unsupported_onnx_ops(expanded) == []
    got = _onnx_runtime(expanded.SerializeToString(), _feeds(case, case.get("layout", 0)))
    want = _reference(case)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _run_tvm(fmt: str, model: bytes, shapes: dict, feeds: list[np.ndarray]) -> list[np.ndarray]:
    from tvm import relax

    from tvmtui.devices.local import local_cpu_target
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(local_cpu_target())
    target = tvm.target.Target(local_cpu_target())
    mod = relax.get_pipeline()(load_relax(fmt, model, shapes))
    vm = relax.VirtualMachine(relax.build(mod, target=target), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(f) for f in feeds])
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


@pytest.mark.parametrize("name", ["lstm-lengths", "lstm-peepholes", "gru-reverse-lengths",
                                  "gru-linear-before-reset", "rnn-bidirectional-lengths"])
def test_written_out_recurrent_nodes_compile_and_match_onnx_runtime(name):
    case = ONNX_CASES[name]
    model = onnx_recurrent(**case)
    feeds = _feeds(case, 0)
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    got = _run_tvm("onnx", model, shapes, list(feeds.values()))
    for g, w in zip(got, _reference(case)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_written_out_steps_give_no_kernel_that_indexes_by_a_tensor():
    """A take (ONNX Gather) kernel gets a random index tensor from MetaSchedule's runner
    and crashes it: such tasks never get a best, and the session never an estimate."""
    from tvmtui.devices.local import local_cpu_target
    from tvmtui.graph import lowering
    from tvmtui.graph import variants as gv
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(local_cpu_target())
    target = tvm.target.Target(local_cpu_target())
    model = onnx_recurrent("LSTM", seq=3, batch=1, direction="bidirectional", initial=True)
    mod, _ = gv.prepare(load_relax("onnx", model, {"X": [3, 1, 7], "H0": [2, 1, 5],
                                                  "C0": [2, 1, 5]}), target, "nchw")
    names = [t.task_name for t in lowering.extract_tasks(mod, target)]
    assert names and not [n for n in names if "take" in n], names


TFLITE_CASES = {
    "keras": dict(),
    "coupled-gates": dict(cifg=True, units=9),
    "peepholes-projection": dict(peepholes=True, projection=4),
    "layer-norm-clip": dict(layer_norm=True, cell_clip=0.5),
    "everything": dict(cifg=True, peepholes=True, layer_norm=True, projection=3, units=9),
    "time-major-batch2": dict(time_major=True, batch=2),
    "bidirectional": dict(bidirectional=True),
    "bidirectional-split-time-major": dict(bidirectional=True, merge=False, time_major=True),
}


@pytest.mark.parametrize("name", list(TFLITE_CASES))
def test_tflite_sequence_lstms_match_litert_reference_kernels(name):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    model = tflite_sequence_lstm(**TFLITE_CASES[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        it = Interpreter(model_content=model,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    from tvm import relax

    from tvmtui.devices.local import local_cpu_target
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(local_cpu_target())
    mod = relax.get_pipeline()(load_relax("tflite", model, {inp["name"]: list(inp["shape"])}))
    vm = relax.VirtualMachine(relax.build(mod, target=tvm.target.Target(local_cpu_target())),
                              tvm.cpu())
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(inp["shape"]).astype(np.float32)
        it.reset_all_variables()
        it.set_tensor(inp["index"], x)
        it.invoke()
        want = [it.get_tensor(o["index"]) for o in it.get_output_details()]
        out = vm["main"](tvm.runtime.tensor(x))
        got = [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _tune_and_bench(cli, path, name: str, baseline: str) -> dict:
    tune = cli.run("tune", str(path), "--trials", "4", "--session", name, "--json")
    assert tune.returncode == 0, tune.stderr[-600:]
    bench = cli.run("bench", name, "--json", "--frames", "4", "--repeats", "2",
                    "--baselines", baseline)
    assert bench.returncode == 0, bench.stderr[-600:]
    row = next(b for b in json.loads(bench.stdout)["baselines"] if b["name"] == baseline)
    assert row["available"], row
    return row


def test_recurrent_models_tune_and_pass_parity_against_their_runtimes(cli, tmp_path):
    """A bidirectional ONNX LSTM with sequence lengths, and a Keras-style TFLite LSTM whose
    state LiteRT would otherwise carry from one frame to the next."""
    onnx_path = tmp_path / "lstm.onnx"
    onnx_path.write_bytes(onnx_recurrent("LSTM", seq=4, batch=1, hidden=9, inputs=6,
                                         direction="bidirectional", peepholes=True))
    row = _tune_and_bench(cli, onnx_path, "onnx-lstm", "onnxruntime")
    assert row["parity"]["passed"], row["parity"]
    tasks = json.loads(cli.run("sessions", "show", "onnx-lstm", "--json").stdout)["tasks"]
    assert not any(t.get("run_errors") for t in tasks), tasks  # every kernel measures
    tflite_path = tmp_path / "lstm.tflite"
    tflite_path.write_bytes(tflite_sequence_lstm(steps=4, units=9, inputs=6))
    row = _tune_and_bench(cli, tflite_path, "tflite-lstm", "tflite")
    assert row["parity"]["passed"], row["parity"]
    shown = json.loads(cli.run("sessions", "show", "tflite-lstm", "--json").stdout)
    assert shown["tasks"], shown


def test_a_recurrent_node_it_cannot_write_out_is_refused_naming_it(cli, tmp_path):
    path = tmp_path / "odd_activation.onnx"
    path.write_bytes(onnx_recurrent("GRU", activations=["Sigmoid", "Swish"]))
    with pytest.raises(UserError) as err:
        load_workload(str(path))
    message = str(err.value)
    assert "GRU (node gru0)" in message and "activation Swish" in message, message
    proc = cli.run("tune", str(path), "--trials", "2")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not cli.root.exists() or not any(cli.root.iterdir())


def test_a_symbolic_time_axis_asks_for_a_length_not_a_batch(tmp_path):
    """A leading dimension named as a sequence is not a batch of 1: it is pinned by the
    user, and the written-out steps follow the length given."""
    path = tmp_path / "streaming_lstm.onnx"
    path.write_bytes(onnx_recurrent("LSTM", seq=5, batch=1, seq_symbol="sequence_length"))
    with pytest.raises(UserError) as err:
        load_workload(str(path))
    assert "--shape X=<sequence_length>x1x7" in str(err.value), str(err.value)
    workload = load_workload(str(path), ["X=3x1x7"])
    assert workload.input_shapes["X"] == [3, 1, 7] and not workload.notices
    mod = load_relax("onnx", workload.model_bytes, workload.input_shapes)
    assert [int(d) for d in mod["main"].ret_ty.fields[0].shape] == [3, 1, 1, 5]
