import onnx
import pytest
from onnx import TensorProto, helper

from tvmtui.core.errors import UserError
from tvmtui.workloads import builtin, load_workload, parse_shapes
from tvmtui.workloads.loader import resolve_shapes


def test_table2_operators_are_all_there_with_paper_shapes():
    assert len([n for n in builtin.OPS if n.startswith("conv:")]) == 12
    assert len([n for n in builtin.OPS if n.startswith("dwconv:")]) == 9
    c1 = builtin.OPS["conv:C1"]
    assert (c1.size, c1.in_channels, c1.out_channels, c1.kernel, c1.stride) == (224, 3, 64, 7, 2)
    assert c1.out_size == 112 and c1.pad == 3
    d9 = builtin.OPS["dwconv:D9"]
    assert (d9.size, d9.in_channels, d9.groups, d9.kernel, d9.stride) == (7, 1024, 1024, 3, 1)
    # C2: 56x56x64 -> 64, 3x3: 2 * 64*56*56*64*9 flops
    assert builtin.OPS["conv:C2"].flops == 2 * 64 * 56 * 56 * 64 * 9


def test_builtin_models_are_valid_onnx_and_hash_stably():
    a = load_workload("conv:C6")
    b = load_workload("CONV:c6")
    assert a.graph_hash == b.graph_hash and a.model_bytes == b.model_bytes
    model = onnx.load_from_string(a.model_bytes)
    onnx.checker.check_model(model)
    assert a.input_shapes == {"input": [1, 128, 28, 28]}
    assert load_workload("conv:C9").graph_hash != a.graph_hash


def _dynamic_model(path):
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_shape_override_pins_dynamic_dims_and_changes_the_hash(tmp_path):
    path = tmp_path / "dyn.onnx"
    _dynamic_model(path)  # only its batch is dynamic: 1, and said
    batch = load_workload(str(path))
    assert batch.input_shapes == {"x": [1, 8]} and batch.pinned == {"x": [1, 8]}
    assert batch.notices == ["input 'x' has a dynamic batch (Nx8): tuned at batch 1; "
                             "--shape x=Nx8 tunes another"]
    one = load_workload(str(path), ["x=1x8"])
    four = load_workload(str(path), ["x=4x8"])
    assert one.input_shapes == {"x": [1, 8]} and not one.notices
    assert one.graph_hash == batch.graph_hash != four.graph_hash
    with pytest.raises(UserError, match="dynamic dimension.*--shape x=1x<T>"):
        resolve_shapes([("x", ["N", "T"])], {}, "m.onnx", {})


@pytest.mark.parametrize("bad", ["x", "x=", "x=1xa", "=1x2", "x=0x3"])
def test_bad_shape_options_are_refused(bad):
    with pytest.raises(UserError, match="--shape"):
        parse_shapes([bad])


def test_unknown_names_and_missing_files(tmp_path):
    with pytest.raises(UserError, match="unknown workload 'conv:C13'"):
        load_workload("conv:C13")
    with pytest.raises(UserError, match="not found"):
        load_workload(str(tmp_path / "nope.onnx"))
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\x01 definitely not protobuf \xff" * 10)
    with pytest.raises(UserError, match="not a readable ONNX model|not an ONNX model"):
        load_workload(str(junk))


def test_operator_tvm_cannot_import_is_named(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["z"], name="act"),
         helper.make_node("Det", ["z"], ["y"], name="det0")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    path = tmp_path / "det.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(UserError, match=r"cannot import: Det \(node det0\)"):
        load_workload(str(path))

