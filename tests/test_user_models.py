"""Users' own files: shape subgraphs folded, sparse and float16 weights made plain,
unsupported operators refused before a session exists, symbolic inputs pinned."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.user_models import (
    batch_matmul_tflite,
    constant_gather_onnx,
    dynamically_quantized_onnx,
    int8_strided_slice_tflite,
    padded_residual_onnx,
    prelu_tflite,
    shape_reshape_onnx,
    small_cnn_tflite,
    with_float16_weights,
    with_sparse_dense_weight,
)
from tvmtui.core.errors import UserError
from tvmtui.workloads.loader import graph_hash, load_workload


def _tune_and_bench(cli, path, name: str, baseline: str, *extra: str) -> dict:
    tune = cli.run("tune", str(path), "--trials", "2", "--variants", "nchw", "--session", name,
                   "--json", *extra)
    assert tune.returncode == 0, tune.stderr[-600:]
    bench = cli.run("bench", name, "--json", "--frames", "3", "--repeats", "2",
                    "--baselines", baseline)
    assert bench.returncode == 0, bench.stderr[-600:]
    report = json.loads(bench.stdout)
    row = next(b for b in report["baselines"] if b["name"] == baseline)
    assert row["available"], row
    return row


def test_reshape_of_a_computed_shape_folds_tunes_and_matches_the_original(cli, tmp_path):
    path = tmp_path / "computed_reshape.onnx"
    path.write_bytes(shape_reshape_onnx())
    workload = load_workload(str(path))
    # The hash is the user's file plus pinned shapes; the session keeps that file as it is.
    model = onnx.load_from_string(workload.model_bytes)
    assert {"Shape", "Gather", "Concat", "Identity"} <= {n.op_type for n in model.graph.node}
    assert workload.graph_hash == graph_hash(workload.model_bytes, {"input": [1, 4, 9, 7]})
    row = _tune_and_bench(cli, path, "computed", "onnxruntime")
    # ONNX Runtime runs the user's original file: parity is against it.
    assert row["parity"]["passed"], row["parity"]


@pytest.mark.parametrize("store", ["float16", "sparse", "sparse+float16"])
def test_sparse_and_float16_stored_weights_tune_and_pass_parity(cli, tmp_path, store):
    data = small_cnn_tflite()
    if "float16" in store:
        data = with_float16_weights(data)
    if "sparse" in store:
        data = with_sparse_dense_weight(data)
    path = tmp_path / f"stored_{store.replace('+', '_')}.tflite"
    path.write_bytes(data)
    row = _tune_and_bench(cli, path, f"stored-{store.replace('+', '-')}", "tflite")
    assert row["parity"]["passed"], row["parity"]


def test_a_kernel_indexed_by_a_constant_measures(cli, tmp_path):
    """A take kernel (`y[3]`) is measured like any other: its index tensor holds zeros,
    not random addresses that crash the runner's process."""
    path = tmp_path / "gather.onnx"
    path.write_bytes(constant_gather_onnx())
    tune = cli.run("tune", str(path), "--trials", "8", "--session", "gather", "--json")
    assert tune.returncode == 0, tune.stderr[-600:]
    shown = json.loads(cli.run("sessions", "show", "gather", "--json").stdout)
    takes = [t for t in shown["tasks"] if "take" in t["name"]]
    assert takes, shown["tasks"]
    for task in shown["tasks"]:
        assert task["trials"] and not task.get("run_errors"), task
        assert task["best_ms"] is not None, task
    assert shown["best_ms"] is not None


def test_tflite_batch_matmuls_tune_and_pass_parity_against_litert(cli, tmp_path):
    """TVM's stock BATCH_MATMUL converter failed on every such operator (it reads shapes
    from `expr.ty`); tvmtui's imports them: broadcast, adj_x and adj_y."""
    path = tmp_path / "batch_matmuls.tflite"
    path.write_bytes(batch_matmul_tflite())
    row = _tune_and_bench(cli, path, "batch-matmuls", "tflite")
    assert row["parity"]["passed"], row["parity"]


def test_tflite_prelus_fuse_into_their_convolutions_and_pass_parity_against_litert(cli,
                                                                                 tmp_path):
    """From revision 24 a float PRELU is max(x, 0) + alpha * min(x, 0): no kernel of its own
    (TVM's converter flattened it, alpha broadcast to the activation's size), in the stock
    and the blocked variant, and the tuned library matches LiteRT."""
    import tvm
    from tvm import relax

    from tvmtui.graph.relax_import import load_relax
    from tvmtui.graph.variants import prepare

    data = prelu_tflite()
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})

    def kernels(revision: int, variant: str) -> list[str]:
        mod = load_relax("tflite", data, {"input": [1, 9, 11, 6]}, revision)
        mod, _ = prepare(mod, target, variant, revision=revision)
        fused = relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod))
        return [g.name_hint for g, f in fused.functions.items()
                if g.name_hint.startswith("fused_") or "prelu" in g.name_hint]

    for variant in ("nchw", "nchwc"):
        before, after = kernels(23, variant), kernels(24, variant)
        assert any("prelu" in name for name in before), before
        assert not any("prelu" in name for name in after), after
        # Each of the three PReLUs is in the kernel of the convolution before it.
        fused_in = [name for name in after if "conv2d" in name and "maximum" in name]
        assert len(fused_in) == 3, after
    path = tmp_path / "prelu.tflite"
    path.write_bytes(data)
    row = _tune_and_bench(cli, path, "prelu", "tflite")
    assert row["parity"]["passed"], row["parity"]


def test_stock_frontend_still_fails_on_densify_then_dequantize(tmp_path):
    """The defect the import layer works around (README: frontend defects): if TVM fixes
    it, this test says the workaround can go."""
    import tflite
    from tvm.relax.frontend.tflite import from_tflite

    data = with_sparse_dense_weight(with_float16_weights(small_cnn_tflite()))
    with pytest.raises(TypeError, match="bytes-like"):
        from_tflite(tflite.Model.GetRootAsModel(data, 0), shape_dict={"input": (1, 10, 10, 4)})


def test_unsupported_quantized_operator_is_refused_before_a_session(cli, tmp_path):
    path = tmp_path / "int8_slice.tflite"
    path.write_bytes(int8_strided_slice_tflite())
    for args in (["tune", str(path), "--trials", "2"], ["bench", str(path), "--frames", "2"]):
        proc = cli.run(*args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert "STRIDED_SLICE (operator #0 -> tensor sliced)" in lines[0]
        assert "float model" in lines[0]
    assert not cli.root.exists() or not any(cli.root.iterdir())


def test_importer_failure_is_refused_before_a_session(cli, tmp_path):
    """A model the checker accepts but TVM's importer cannot convert: exit 2, one line
    naming the operator and its node, and no session folder."""
    from onnx import TensorProto, helper

    node = helper.make_node("Reshape", ["input", "shape"], ["output"], name="the_reshape")
    graph = helper.make_graph(
        [node], "dynamic_reshape",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 6]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["a", "b"])])
    path = tmp_path / "runtime_shape.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                     .SerializeToString())
    with pytest.raises(UserError) as err:
        load_workload(str(path))
    assert "Reshape" in str(err.value) and "the_reshape" in str(err.value)
    proc = cli.run("tune", str(path), "--trials", "2")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not cli.root.exists() or not any(cli.root.iterdir())


def test_symbolic_batch_tunes_at_one_other_symbolic_dims_ask(cli, tmp_path):
    """A dynamic leading batch is 1, said on stderr and as a notice event naming the --shape
    that changes it; a model with any other dynamic dimension still asks for a shape."""
    both = tmp_path / "both.onnx"
    both.write_bytes(shape_reshape_onnx(batch="N", height="H"))
    proc = cli.run("tune", str(both), "--trials", "2")
    assert proc.returncode == 2, proc.stderr
    assert "--shape input=1x4x<H>x7" in proc.stderr
    assert not cli.root.exists() or not any(cli.root.iterdir())
    path = tmp_path / "symbolic.onnx"
    path.write_bytes(shape_reshape_onnx(batch="N"))
    said = ("input 'input' has a dynamic batch (Nx4x9x7): tuned at batch 1; --shape "
            "input=Nx4x9x7 tunes another")
    one = cli.run("tune", str(path), "--trials", "2", "--variants", "nchw", "--session", "b1",
                  "--json")
    assert one.returncode == 0, one.stderr[-500:]
    assert f"note: {said}" in one.stderr
    events = [json.loads(line) for line in one.stdout.splitlines()]
    assert [e["message"] for e in events if e["event"] == "notice"].count(said) == 1
    shown = json.loads(cli.run("sessions", "show", "b1", "--json").stdout)
    assert shown["workload_info"]["input_shapes"] == {"input": [1, 4, 9, 7]}
    assert shown["workload_info"]["pinned"] == {"input": [1, 4, 9, 7]}
    tune = cli.run("tune", str(path), "--shape", "input=2x4x9x7", "--trials", "2",
                   "--variants", "nchw", "--session", "pinned", "--json")
    assert tune.returncode == 0, tune.stderr[-500:]
    shown = json.loads(cli.run("sessions", "show", "pinned", "--json").stdout)
    assert shown["workload_info"]["input_shapes"] == {"input": [2, 4, 9, 7]}
    assert "dynamic batch" not in tune.stderr
    listed = {s["name"]: s for s in json.loads(cli.run("sessions", "list", "--json").stdout)}
    assert listed["pinned"]["pinned"] == {"input": [2, 4, 9, 7]}
    from tvmtui import fmt
    from tvmtui.sessions.store import SessionSummary

    # The sessions table (CLI and the app's Sessions screen) names the pinned shape.
    assert fmt.session_cells(SessionSummary(**listed["pinned"]))[1] == "symbolic (input=2x4x9x7)"


def test_task_whose_space_breaks_is_tuned_without_the_rule_at_fault(cli, tmp_path):
    """BlazeFace's padded residual: MetaSchedule's default space raises a ScheduleError for
    the fused conv; the session tunes it without AutoInline, says so, and the library
    built from it is correct."""
    path = tmp_path / "padded_residual.onnx"
    path.write_bytes(padded_residual_onnx())
    row = _tune_and_bench(cli, path, "padded", "onnxruntime")
    assert row["parity"]["passed"], row["parity"]
    shown = json.loads(cli.run("sessions", "show", "padded", "--json").stdout)
    assert shown["status"] == "finished", shown
    (task,) = [t for t in shown["tasks"] if "pad" in t["name"] and "conv2d" in t["name"]]
    assert task["without"] == "rule:AutoInline" and task["failed"] is None
    assert task["best_ms"] is not None and task["trials"] >= 1
    events = [json.loads(line) for line in cli.run("attach", "padded", "--json").stdout.splitlines()
              if line.strip()]
    assert any(e["event"] == "task_space" and e["without"] == "rule:AutoInline" for e in events)
    assert any(e["event"] == "notice" and "without rule:AutoInline" in e["message"]
               for e in events)


def test_a_users_int8_file_with_pads_loads(tmp_path):
    """The TFLite converter writes int8 PADs before strided or padded layers: a user's own
    file with them loads (TVM's stock converter refuses quantized PAD; tvmtui's takes it)."""
    from tests.test_integer import _few_channels, _int8

    path = tmp_path / "int8.tflite"
    path.write_bytes(_int8(_few_channels(4), (1, 4, 15, 13)))
    workload = load_workload(str(path))
    assert workload.format == "tflite" and workload.input_shapes == {"input": [1, 15, 13, 4]}


def test_int8_zoo_twin_tunes_blocked_and_is_exact_against_litert_reference_kernels(cli):
    """DQN's int8 twin (per-channel weights, calibrated activations) computes in integers,
    tunes in the blocked layout, and its bench checks every row against LiteRT's reference
    kernels: tuned TVM to 0 steps; LiteRT's XNNPACK row within the quantized gate."""
    from tvmtui.baselines.model import bench_model
    from tvmtui.baselines.parity import QUANT_STEPS

    workload = load_workload("dqn-int8")
    assert workload.format == "tflite"
    (step,) = bench_model(workload.meta(), workload.model_bytes).output_steps
    assert step and step > 0  # the output is dequantized from an int8 tensor
    tune = cli.run("tune", "dqn-int8", "--trials", "8", "--variants", "nchwc", "--session", "d8",
                   "--json")
    assert tune.returncode == 0, tune.stderr[-600:]
    bench = cli.run("bench", "d8", "--json", "--frames", "3", "--repeats", "2",
                    "--baselines", "tflite,onnxruntime")
    assert bench.returncode == 0, bench.stderr[-600:]
    report = json.loads(bench.stdout)
    rows = {b["name"]: b for b in report["baselines"]}
    for name in ("tflite", "onnxruntime"):  # ONNX Runtime runs the twin's QDQ file
        assert rows[name]["parity"]["passed"], rows[name]["parity"]
        assert rows[name]["parity"]["max_steps"] <= QUANT_STEPS
    assert "int8 QDQ" in rows["onnxruntime"]["detail"]
    kernels = report["reference_kernels"]
    assert kernels["frames"] == 3 and "reference kernels" in kernels["runtime"]
    assert kernels["steps"]["tvm-tuned"] == 0
    assert kernels["steps"]["tflite"] is not None and kernels["steps"]["onnxruntime"] is not None
    assert report["variant"].startswith("NCHW")
    assert report["float_twin"] is None  # no tuned float DQN on this chip yet
    # with one, it is timed beside the int8 rows: "int8 vs float"
    tuned = cli.run("tune", "dqn", "--trials", "16", "--variants", "nchw", "--session", "f32",
                    "--no-reuse", "--json")  # every task measured: an estimate to pick it by
    assert tuned.returncode == 0, tuned.stderr[-600:]
    again = json.loads(cli.run("bench", "d8", "--json", "--frames", "2", "--repeats", "2",
                               "--baselines", "tflite").stdout)
    twin = again["float_twin"]
    assert twin["session"] == "f32" and twin["workload"] == "dqn" and twin["median_ms"] > 0
    int8_ms = next(b["median_ms"] for b in again["baselines"] if b["name"] == "tvm-tuned")
    assert twin["int8_speedup"] == pytest.approx(twin["median_ms"] / int8_ms)
    assert any(n.startswith("int8 vs float: ") and "session f32" in n for n in again["notes"])
    shown = json.loads(cli.run("sessions", "show", "d8", "--json").stdout)
    from tvmtui.graph.dotprod import instruction
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(shown["target"])
    chip = instruction(tvm.target.Target(shown["target"]))
    dot = [t for t in shown["tasks"] if "dot_conv2d" in t["name"]]
    assert all(t["instruction"] == chip for t in dot)
    if chip is not None:  # the three convolutions and (revision 17) the 3136 -> 512 layer
        assert len(dot) == 4 and chip in shown["variant_label"]
        assert any(layer["instruction"] == chip for layer in report["layers"])


def test_app_prompts_for_a_symbolic_input_shape(tmp_path):
    """Typing a model path with a symbolic dimension other than its batch shows which input
    needs a shape and a value to start from; the pinned shape then starts a session."""
    import asyncio

    from tvmtui.tui.app import TvmTuiApp

    path = tmp_path / "symbolic.onnx"
    path.write_bytes(shape_reshape_onnx(batch="N", height="H"))

    async def scenario():
        app = TvmTuiApp(tmp_path / "sessions", start="launch")
        async with app.run_test(size=(100, 30)) as pilot:
            screen = app.screen
            screen.query_one("#model-path").value = str(path)
            prompt = screen.query_one("#shape-prompt")
            for _ in range(40):
                await pilot.pause(0.25)
                if prompt.display:
                    break
            assert prompt.display
            assert "input=1x4x<H>x7" in str(prompt.content)
            assert screen.query_one("#shapes").placeholder == "input=1x4x<H>x7"
            await pilot.press("ctrl+s")  # without a shape: the error says what to pin
            await pilot.pause(1.5)
            assert any("--shape input=1x4x<H>x7" in n.message for n in app._notifications)
            assert not (tmp_path / "sessions").exists() or not any((tmp_path / "sessions").iterdir())

    asyncio.run(scenario())


def test_dynamically_quantized_matmuls_tune_with_parity_and_convolutions_are_refused(cli, tmp_path):
    """DynamicQuantizeLinear + MatMulInteger imports and matches ONNX Runtime; ConvInteger,
    which TVM's importer lacks, is refused up front, naming it and what to do instead."""
    path = tmp_path / "dynamic_matmul.onnx"
    path.write_bytes(dynamically_quantized_onnx(tmp_path, conv=False))
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    row = _tune_and_bench(cli, path, "dynamic", "onnxruntime")
    assert row["parity"]["passed"], row["parity"]
    conv = tmp_path / "dynamic_conv.onnx"
    conv.write_bytes(dynamically_quantized_onnx(tmp_path, conv=True))
    with pytest.raises(UserError, match=r"cannot import: ConvInteger \(node #\d+\); it is "
                       r"dynamically quantized.*quantize_static") as err:
        load_workload(str(conv))
    assert "\n" not in str(err.value)
    refused = cli.run("tune", str(conv), "--trials", "2")
    assert refused.returncode == 2 and "ConvInteger" in refused.stderr
    assert "Traceback" not in refused.stderr
