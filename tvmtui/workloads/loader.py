"""Resolve a workload name or model file into a validated ONNX model and its graph hash."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from tvmtui.core.errors import UserError
from tvmtui.workloads import builtin, nets, tflite_file


@dataclass(frozen=True)
class Workload:
    """A model ready to tune: static input shapes, canonical bytes and the hash over both."""

    name: str
    kind: str  # "network", "conv2d", "depthwise_conv2d", "onnx" or "tflite"
    source: str  # "builtin:conv:C12" or the absolute path of the user's file
    input_shapes: dict[str, list[int]]
    graph_hash: str
    model_bytes: bytes = field(repr=False)
    flops: int | None = None
    format: str = "onnx"  # the model file's format: "onnx" or "tflite"
    pinned: dict[str, list[int]] = field(default_factory=dict)  # shapes set with --shape
    notices: list[str] = field(default_factory=list)  # what loading decided for the user

    def meta(self) -> dict:
        """What a session stores about its workload."""
        return {
            "name": self.name,
            "kind": self.kind,
            "source": self.source,
            "input_shapes": self.input_shapes,
            "graph_hash": self.graph_hash,
            "flops": self.flops,
            "format": self.format,
            "pinned": self.pinned,
            "notices": self.notices,
        }


MAX_INPUT_ELEMENTS = 1 << 28  # 1 GiB of float32 per input: past this a shape is a mistake

_SHAPE_RE = re.compile(r"^([^=\s]+)=(\d+(?:x\d+)*)$")


def parse_shapes(items: list[str] | None) -> dict[str, list[int]]:
    """Parse `--shape NAME=1x3x224x224` options."""
    shapes: dict[str, list[int]] = {}
    for item in items or []:
        m = _SHAPE_RE.match(item.strip())
        if not m:
            raise UserError(
                f"bad --shape {item!r}: expected NAME=DIMxDIMx..., e.g. --shape input=1x3x224x224"
            )
        dims = [int(d) for d in m.group(2).split("x")]
        if any(d <= 0 for d in dims):
            raise UserError(f"bad --shape {item!r}: every dimension must be a positive integer")
        shapes[m.group(1)] = dims
    return shapes


def graph_hash(model_bytes: bytes, input_shapes: dict[str, list[int]]) -> str:
    """Stable key of a workload: its canonical model bytes plus the pinned input shapes."""
    h = hashlib.sha256()
    h.update(model_bytes)
    h.update(json.dumps(input_shapes, sort_keys=True).encode())
    return h.hexdigest()[:16]


def _canonical_bytes(model) -> bytes:
    return model.SerializeToString(deterministic=True)


def _dynamic(d) -> bool:
    return not isinstance(d, int) or d <= 0


# A leading symbol named like these is a sequence, not a batch: it asks for a length.
_SEQUENCE_WORDS = ("seq", "time", "len", "step", "frame")


def batch_only(dims: list) -> bool:
    """Whether a shape's one dynamic dimension is its leading one and a batch (unnamed, or
    not named as a sequence: `sequence_length` is a recurrent model's time axis)."""
    if not dims or not _dynamic(dims[0]) or any(_dynamic(d) for d in dims[1:]):
        return False
    name = dims[0].lower() if isinstance(dims[0], str) else ""
    return not any(word in name for word in _SEQUENCE_WORDS)


def resolve_shapes(
    declared: list[tuple[str, list[int]]], overrides: dict[str, list[int]], path,
    batched: dict[str, str] | None = None,
) -> dict[str, list[int]]:
    """Apply `--shape` overrides to a model's declared input shapes (a dimension <= 0 is
    dynamic); refuse unknown names, wrong ranks and any dimension left dynamic but a leading
    batch, which is 1 (`batched`: input -> the notice saying so, and the --shape that
    changes it)."""
    known = {name for name, _ in declared}
    for name in overrides:
        if name not in known:
            raise UserError(
                f"--shape names input {name!r}, but {path} has inputs: {', '.join(sorted(known))}"
            )
    shapes: dict[str, list[int]] = {}
    for name, dims in declared:
        new = overrides.get(name)
        if new is not None and len(new) != len(dims):
            raise UserError(
                f"--shape {name} has {len(new)} dimensions, the model's input has {len(dims)}"
            )
        dims = list(new) if new is not None else list(dims)
        if new is None and batch_only(dims):
            shown = _shown(dims)
            dims = [1, *dims[1:]]
            if batched is not None:
                batched[name] = (f"input {name!r} has a dynamic batch ({shown}): tuned at batch "
                                 f"1; --shape {name}={'x'.join(['N', *map(str, dims[1:])])} "
                                 "tunes another")
        if any(_dynamic(d) for d in dims):
            raise UserError(
                f"input {name!r} of {path} has a dynamic dimension ({_shown(dims)}); pin it "
                f"with --shape {name}={_suggested(dims)}"
            )
        elements = 1
        for d in dims:
            elements *= d
        if elements > MAX_INPUT_ELEMENTS:
            raise UserError(
                f"input {name!r} of {path} would be {_shown(dims)} = {elements:,} elements, more "
                f"than tvmtui handles ({MAX_INPUT_ELEMENTS:,}); pin a smaller shape with --shape"
            )
        shapes[name] = dims
    if not shapes:
        raise UserError(f"{path} has no inputs to feed: nothing to tune")
    return shapes


def _shown(dims: list) -> str:
    return "x".join(str(d) if isinstance(d, int) and d > 0 else (d or "?") if isinstance(d, str)
                    else "?" for d in dims)


def _suggested(dims: list) -> str:
    """A --shape value to start from: 1 for a dynamic batch (the first dimension), the
    symbol's name in <> for any other dynamic dimension."""
    out = []
    for i, d in enumerate(dims):
        if isinstance(d, int) and d > 0:
            out.append(str(d))
        elif i == 0 and batch_only([d]):
            out.append("1")
        else:
            out.append(f"<{d}>" if isinstance(d, str) and d else "<N>")
    return "x".join(out)


def _onnx_declared(model) -> list[tuple[str, list]]:
    """(name, dims) of the graph's real inputs; a symbolic dim is its name (or 0)."""
    init_names = {init.name for init in model.graph.initializer}
    return [
        (i.name, [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or 0)
                  for d in i.type.tensor_type.shape.dim])
        for i in model.graph.input if i.name not in init_names
    ]


def dynamic_inputs(path: str) -> list[str]:
    """For a model file, `NAME=SUGGESTION` for every input with a symbolic dimension other
    than a leading batch, which is 1 (what `--shape` / the app's shapes field needs); [] for
    static or unreadable files."""
    file = Path(path)
    try:
        if file.suffix.lower() == ".tflite":
            import tflite

            data = file.read_bytes()
            declared = tflite_file.declared_inputs(tflite.Model.GetRootAsModel(data, 0).Subgraphs(0))
        else:
            import onnx

            declared = _onnx_declared(onnx.load(str(file), load_external_data=False))
    except Exception:  # noqa: BLE001 - loading reports what is wrong with the file
        return []
    return [f"{name}={_suggested(dims)}" for name, dims in declared
            if any(_dynamic(d) for d in dims) and not batch_only(dims)]


def _pin_shapes(model, overrides: dict[str, list[int]], path: str,
                batched: dict[str, str]) -> dict[str, list[int]]:
    """Resolve the ONNX graph's input shapes and write them into the graph."""
    init_names = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in init_names]
    shapes = resolve_shapes(_onnx_declared(model), overrides, path, batched)
    for inp in inputs:
        for dim, value in zip(inp.type.tensor_type.shape.dim, shapes[inp.name]):
            dim.ClearField("dim_param")
            dim.dim_value = value
    return shapes


def _file_workload(path: Path, fmt: str, data: bytes, shapes: dict[str, list[int]],
                   overrides: dict[str, list[int]], batched: dict[str, str]) -> Workload:
    return Workload(
        name=path.stem,
        kind=fmt,
        source=str(path.resolve()),
        input_shapes=shapes,
        graph_hash=graph_hash(data, shapes),
        model_bytes=data,
        format=fmt,
        pinned={k: shapes[k] for k in shapes if k in overrides or k in batched},
        notices=list(batched.values()),
    )


# ONNX Runtime's dynamic quantizer writes these after each DynamicQuantizeLinear.
DYNAMIC_QUANTIZED = ("ConvInteger", "MatMulInteger")


def unsupported_onnx_ops(model) -> list[str]:
    """Operator types in the graph that TVM's Relax ONNX frontend cannot import."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    from tvmtui.graph.recurrent import RECURRENT

    # The importer converts If itself; recurrent nodes are written out before it runs.
    supported = {*_get_convert_map(), "If", *RECURRENT}
    found: dict[str, str] = {}
    for i, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type not in supported:
            label = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            found.setdefault(label, f"{label} (node {node.name or f'#{i}'})")
    return list(found.values())


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}; check its permissions") from None


def _load_onnx_file(path: Path, overrides: dict[str, list[int]]) -> Workload:
    import onnx
    from google.protobuf.message import DecodeError

    data = _read(path)
    try:
        model = onnx.load_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise UserError(f"{path} is not a readable ONNX model ({exc}); check the file") from None
    if not model.graph.node:
        raise UserError(f"{path} is not an ONNX model with a graph (no nodes); check the file")
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as exc:  # incl. bad UTF-8 in names
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid"
        raise UserError(f"{path} is not a valid ONNX model: {first}") from None
    batched: dict[str, str] = {}
    shapes = _pin_shapes(model, overrides, str(path), batched)
    missing = unsupported_onnx_ops(model)
    if missing:
        dynamic = any(m.startswith(DYNAMIC_QUANTIZED) for m in missing)
        raise UserError(
            f"{path} uses operators TVM's ONNX frontend cannot import: {', '.join(missing)}"
            + ("; it is dynamically quantized (integer ops with scales computed at run time):"
               " quantize it statically (QDQ, onnxruntime's quantize_static) or tune the float"
               " model" if dynamic else ""))
    return _checked(_file_workload(path, "onnx", _canonical_bytes(model), shapes, overrides,
                                   batched))


def _load_tflite_file(path: Path, overrides: dict[str, list[int]]) -> Workload:
    """A `.tflite` flatbuffer: check it parses, its operators import, its shapes are static."""
    data = _read(path)
    try:
        import tflite
    except ImportError:
        raise UserError("reading .tflite needs the `tflite` package: pip install tflite") from None
    try:
        if len(data) < 8 or data[4:8] != b"TFL3":
            raise ValueError("no TFL3 file identifier")
        model = tflite.Model.GetRootAsModel(data, 0)
        subgraph = model.Subgraphs(0)
        ops = tflite_file.operators(model, subgraph)
        inputs = tflite_file.declared_inputs(subgraph)
        # Reads every operator's tensors and buffers: a corrupt offset fails here too.
        missing, quantized = tflite_file.refused_operators(model, subgraph, ops)
    except Exception as exc:  # noqa: BLE001 - any parse failure of untrusted bytes
        raise UserError(
            f"{path} is not a readable TFLite model ({type(exc).__name__}: {exc}); "
            "is it truncated? check the file"
        ) from None
    if missing:
        raise UserError(
            f"{path} uses operators TVM's TFLite frontend cannot import: {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''}; export the model without them"
        )
    if quantized:
        raise UserError(
            f"{path} has quantized operators TVM's TFLite frontend cannot import: "
            f"{', '.join(quantized[:5])}{' ...' if len(quantized) > 5 else ''}; "
            "use a float model, or one without them"
        )
    batched: dict[str, str] = {}
    shapes = resolve_shapes(inputs, overrides, path, batched)
    return _checked(_file_workload(path, "tflite", data, shapes, overrides, batched))


def _checked(workload: Workload) -> Workload:
    """Refuse a user's file that TVM's importer fails on, before any session exists."""
    from tvmtui.graph.relax_import import import_problem

    problem = import_problem(workload.format, workload.model_bytes, workload.input_shapes)
    if problem:
        raise UserError(f"{workload.source}: {problem}; export the model without that "
                        "operator, or with static shapes (pin inputs with --shape)")
    return workload


def load_builtin(spec: builtin.OpSpec) -> Workload:
    model = builtin.build_onnx(spec)
    data = _canonical_bytes(model)
    shapes = {"input": spec.input_shape}
    return Workload(
        name=spec.name,
        kind=spec.kind,
        source=f"builtin:{spec.name}",
        input_shapes=shapes,
        graph_hash=graph_hash(data, shapes),
        model_bytes=data,
        flops=spec.flops,
    )


def load_network(spec: nets.NetSpec) -> Workload:
    onnx_path, _ = nets.network_files(spec)
    data = onnx_path.read_bytes()
    stats = nets.count(spec)
    shapes = {"input": list(spec.input_shape)}
    return Workload(
        name=spec.name,
        kind="network",
        source=f"builtin:{spec.name}",
        input_shapes=shapes,
        graph_hash=graph_hash(data, shapes),
        model_bytes=data,
        flops=2 * stats.macs,
    )


def load_int8_twin(name: str) -> Workload:
    from tvmtui.workloads import int8

    spec = nets.NETS[int8.INT8_TWINS[name]]
    data = int8.twin_file(name).read_bytes()
    n, c, h, w = spec.input_shape
    shapes = {"input": [n, h, w, c]}  # TFLite: NHWC
    return Workload(
        name=name,
        kind="network",
        source=f"builtin:{name}",
        input_shapes=shapes,
        graph_hash=graph_hash(data, shapes),
        model_bytes=data,
        flops=2 * nets.count(spec).macs,
        format="tflite",
    )


def load_workload(spec: str, shape_items: list[str] | None = None) -> Workload:
    """A built-in name (`resnet18`, `conv:C12`, `dwconv:D1`, `mobilenet-int8`) or a path to
    an `.onnx` / `.tflite` file."""
    from tvmtui.workloads.int8 import INT8_TWINS

    overrides = parse_shapes(shape_items)
    if spec.lower() in INT8_TWINS:
        if overrides:
            raise UserError(f"--shape does not apply to the built-in network {spec}")
        return load_int8_twin(spec.lower())
    net = nets.NETS.get(spec.lower())
    if net is not None:
        if overrides:
            raise UserError(f"--shape does not apply to the built-in network {net.name}")
        return load_network(net)
    op = builtin.lookup(spec)
    if op is not None:
        if overrides:
            raise UserError(f"--shape does not apply to the built-in workload {op.name}")
        return load_builtin(op)
    path = Path(spec)
    if path.suffix.lower() in (".onnx", ".tflite") or path.exists():
        if not path.exists():
            raise UserError(f"model file not found: {spec}")
        if path.is_dir():
            raise UserError(f"{spec} is a directory, not a model file")
        if path.suffix.lower() == ".tflite":
            return _load_tflite_file(path, overrides)
        return _load_onnx_file(path, overrides)
    if ":" in spec or "/" not in spec:
        names = ", ".join([*nets.NETS, *list(builtin.OPS)[:2]]) + ", ..."
        raise UserError(
            f"unknown workload {spec!r}: use a built-in ({names}; see `tvmtui zoo list`) "
            "or a path to an .onnx file"
        )
    raise UserError(f"model file not found: {spec}")
