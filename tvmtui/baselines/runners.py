"""One adapter per runtime. Each loads the model for a thread count and gives a `Runner`:
`feed` converts a native-layout frame once, `invoke` is the call that gets timed, and
`outputs` returns the results in the native layout. An adapter that cannot run here raises
`Unavailable` with the reason and, where there is one, how to get it."""

from __future__ import annotations

import os
import platform
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tvmtui.baselines.model import BenchModel

NAMES = ("tflite", "acl", "onnxruntime", "openvino", "tvm-untuned", "tvm-tuned")
DEFAULT = ("tflite", "acl", "onnxruntime", "openvino", "tvm-untuned")


class Unavailable(Exception):
    """This baseline cannot run here; the message says why and what would fix it."""


@dataclass
class Runner:
    name: str
    detail: str  # runtime and version, e.g. "LiteRT 2.3.0 (XNNPACK)"
    feed: Callable[[list[np.ndarray]], Any]  # a frame as the runtime takes it
    invoke: Callable[[Any], Any]  # -> its outputs, as it gives them
    outputs: Callable[[Any], list[np.ndarray]]

    def infer(self, frame: list[np.ndarray]) -> list[np.ndarray]:
        return self.outputs(self.invoke(self.feed(frame)))


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


# ---- TFLite (LiteRT, XNNPACK) and Arm NN ----------------------------------------------
def _tflite_runner(name: str, detail: str, model: BenchModel, interpreter) -> Runner:
    interpreter.allocate_tensors()
    ins = [d["index"] for d in interpreter.get_input_details()]
    outs = [d["index"] for d in interpreter.get_output_details()]

    def feed(frame):
        # A sequence LSTM's state is a variable tensor that LiteRT carries from one invoke
        # to the next: every frame starts from the stored state, as the compiled graph does.
        interpreter.reset_all_variables()
        for index, x in zip(ins, model.to_format("tflite", frame)):
            interpreter.set_tensor(index, x)
        return None

    def invoke(_):
        interpreter.invoke()

    def outputs(_):
        return model.from_format("tflite", [interpreter.get_tensor(i) for i in outs])

    return Runner(name, detail, feed, invoke, outputs)


def _need_tflite(model: BenchModel) -> bytes:
    if not model.has("tflite"):
        raise Unavailable(
            f"{model.name} has no TFLite file: it is an ONNX model and only the built-in "
            "workloads have a TFLite twin; bench a .tflite export of it instead"
        )
    return model.files["tflite"]


def load_tflite(model: BenchModel, threads: int, options: dict) -> Runner:
    from tvmtui.core.errors import UserError
    from tvmtui.workloads.litert import make_interpreter

    data = _need_tflite(model)
    try:
        interpreter = make_interpreter(data, threads)
    except UserError as exc:
        raise Unavailable(str(exc)) from None
    pkg = "LiteRT " + _version("ai-edge-litert")
    if pkg.endswith("?"):
        pkg = "tflite-runtime " + _version("tflite-runtime")
    return _tflite_runner("tflite", f"{pkg} (XNNPACK)", model, interpreter)


def load_tflite_reference(model: BenchModel, threads: int, options: dict) -> Runner:
    """LiteRT with its reference kernels (no XNNPACK, no optimized kernels): what a
    quantized model's integer arithmetic is defined by. Checked against, never timed."""
    import warnings

    data = _need_tflite(model)
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        raise Unavailable("LiteRT's reference kernels need ai-edge-litert") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        interpreter = Interpreter(model_content=data,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    detail = f"LiteRT {_version('ai-edge-litert')} reference kernels"
    return _tflite_runner(REFERENCE_KERNELS, detail, model, interpreter)


REFERENCE_KERNELS = "tflite-ref"
ARMNN_LIB = "libarmnnDelegate.so"
_ARMNN_DIRS = ("/usr/lib/aarch64-linux-gnu", "/usr/local/lib", "/usr/lib", "/opt/armnn/lib")


def find_armnn_delegate(given: str | None) -> Path | None:
    """`--armnn-delegate PATH`, `$ARMNN_DELEGATE`, else the usual library folders."""
    explicit = given or os.environ.get("ARMNN_DELEGATE")
    if explicit:
        path = Path(explicit)
        if path.is_dir():
            path = path / ARMNN_LIB
        if not path.is_file():
            raise Unavailable(f"not available here: no Arm NN delegate at {path}")
        return path
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    for folder in (*dirs, *_ARMNN_DIRS):
        path = Path(folder) / ARMNN_LIB
        if path.is_file():
            return path
    return None


def _has_pyarmnn() -> bool:
    from importlib.util import find_spec

    return find_spec("pyarmnn") is not None


def cannot_run_here(name: str, options: dict) -> str | None:
    """Why baseline `name` cannot run on this machine, when that is known without loading
    a model (ACL without Arm NN); else None."""
    if name == "acl" and find_armnn_delegate(options.get("armnn_delegate")) is None \
            and not _has_pyarmnn():
        return _no_armnn()
    return None


def _no_armnn() -> str:
    machine = platform.machine()
    where = (
        "Arm NN runs ARM Compute Library kernels on Arm CPUs only and this machine is "
        f"{machine}" if machine not in ("aarch64", "arm64", "armv7l") else
        f"neither {ARMNN_LIB} nor pyarmnn was found; install Arm NN (Debian: python3-pyarmnn "
        "libarmnn-cpuacc-backend22 libarmnntfliteparser22) or pass --armnn-delegate PATH"
    )
    return (f"not available here: {where} (OpenVINO's CPU plugin uses ACL on Arm: "
            "the openvino baseline is the pip route)")


def load_acl(model: BenchModel, threads: int, options: dict) -> Runner:
    """ARM Compute Library through the Arm NN TFLite delegate (CpuAcc backend), else
    through Arm NN's own TFLite parser (pyarmnn, CpuAcc backend)."""
    path = find_armnn_delegate(options.get("armnn_delegate"))
    if path is None:
        if _has_pyarmnn():
            return _armnn_parser_runner(model, threads)
        raise Unavailable(_no_armnn())
    try:
        from ai_edge_litert.interpreter import Interpreter, load_delegate
    except ImportError:
        from tflite_runtime.interpreter import Interpreter, load_delegate
    data = _need_tflite(model)
    try:
        delegate = load_delegate(
            str(path), options={"backends": "CpuAcc,CpuRef", "number-of-threads": str(threads)}
        )
        interpreter = Interpreter(
            model_content=data, num_threads=threads, experimental_delegates=[delegate]
        )
    except (ValueError, RuntimeError, OSError) as exc:
        raise Unavailable(f"the Arm NN delegate at {path} failed to load: {exc}") from None
    return _tflite_runner("acl", f"Arm NN delegate {path} (CpuAcc)", model, interpreter)


def _armnn_parser_runner(model: BenchModel, threads: int) -> Runner:
    """Arm NN's TFLite parser, optimized for CpuAcc only (ACL's NEON kernels): a layer
    ACL cannot run fails the load rather than falling back to reference code unseen."""
    import pyarmnn as ann

    data = _need_tflite(model)
    with tempfile.NamedTemporaryFile(suffix=".tflite") as fh:
        fh.write(data)
        fh.flush()
        parser = ann.ITfLiteParser()
        try:
            network = parser.CreateNetworkFromBinaryFile(fh.name)
        except RuntimeError as exc:
            raise Unavailable(f"Arm NN's TFLite parser refused the model: {exc}") from None
    runtime = ann.IRuntime(ann.CreationOptions())
    opts = ann.OptimizerOptions()
    backend = ann.BackendId("CpuAcc")
    try:
        cpu_acc = ann.BackendOptions(backend)
        cpu_acc.AddOption(ann.BackendOption("NumberOfThreads", int(threads)))
        opts.m_ModelOptions = [cpu_acc]
        threads_note = f", {threads} thread(s)"
    except (AttributeError, TypeError):  # pyarmnn 22 has no backend options: ACL's own count
        threads_note = ", ACL's own thread count"
    try:
        optimized, _ = ann.Optimize(network, [backend], runtime.GetDeviceSpec(), opts)
        net_id, _ = runtime.LoadNetwork(optimized)
    except RuntimeError as exc:
        raise Unavailable(f"Arm NN could not run this model on CpuAcc: {exc}") from None
    ins = [parser.GetNetworkInputBindingInfo(0, n) for n in parser.GetSubgraphInputTensorNames(0)]
    outs = [parser.GetNetworkOutputBindingInfo(0, n)
            for n in parser.GetSubgraphOutputTensorNames(0)]
    out_tensors = ann.make_output_tensors(outs)

    def feed(frame):
        return ann.make_input_tensors(ins, model.to_format("tflite", frame))

    def invoke(tensors):
        runtime.EnqueueWorkload(net_id, tensors, out_tensors)

    def outputs(_):
        return model.from_format("tflite", [np.array(a) for a in
                                            ann.workload_tensors_to_ndarray(out_tensors)])

    version = getattr(ann, "ARMNN_VERSION", None) or _version("pyarmnn")
    return Runner("acl", f"Arm NN {version} TFLite parser, CpuAcc{threads_note}",
                  feed, invoke, outputs)


# ---- ONNX Runtime and OpenVINO -----------------------------------------------------------
def load_onnxruntime(model: BenchModel, threads: int, options: dict) -> Runner:
    try:
        import onnxruntime as ort
    except ImportError:
        raise Unavailable("ONNX Runtime is not installed: pip install onnxruntime") from None
    if not model.has("onnx"):
        raise Unavailable(
            f"{model.name} is a TFLite model and ONNX Runtime reads ONNX; bench the .onnx "
            "original of it instead"
        )
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.files["onnx"], so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]

    def feed(frame):
        return dict(zip(names, model.to_format("onnx", frame)))

    def invoke(inputs):
        return sess.run(None, inputs)

    return Runner(
        "onnxruntime", f"ONNX Runtime {ort.__version__} (CPU EP"
        f"{', int8 QDQ' if any(model.output_steps) else ''})", feed, invoke,
        lambda result: model.from_format("onnx", list(result)),
    )


def load_openvino(model: BenchModel, threads: int, options: dict) -> Runner:
    try:
        import openvino as ov
    except ImportError:
        raise Unavailable(
            "OpenVINO is not installed: pip install openvino (or tvmtui[bench])"
        ) from None
    fmt = "onnx" if model.has("onnx") else "tflite"
    core = ov.Core()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"model.{fmt}"
        path.write_bytes(model.files[fmt])
        ov_model = core.read_model(str(path))
        config = {
            "INFERENCE_NUM_THREADS": threads,
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1,
            # f32 like every other baseline: OpenVINO would pick bf16 on CPUs that have it.
            "INFERENCE_PRECISION_HINT": "f32",
        }
        compiled = core.compile_model(ov_model, "CPU", config)
    request = compiled.create_infer_request()
    n_out = len(compiled.outputs)

    def feed(frame):
        return dict(enumerate(model.to_format(fmt, frame)))

    def invoke(inputs):
        request.infer(inputs, share_inputs=True)

    def outputs(_):
        return model.from_format(fmt, [request.get_output_tensor(i).data.copy()
                                       for i in range(n_out)])

    kind = "int8 from the QDQ file" if fmt == "onnx" and any(model.output_steps) else "f32"
    return Runner("openvino", f"OpenVINO {ov.__version__.split('-')[0]} (CPU, {kind})",
                  feed, invoke, outputs)


# ---- TVM ----------------------------------------------------------------------------------
def tvm_runner(name: str, library: Path, model: BenchModel, detail: str) -> Runner:
    """A compiled Relax library on the local CPU (threads: `TVM_NUM_THREADS`, set by the host)."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
    main = vm["main"]

    def feed(frame):
        return [tvm.runtime.tensor(x) for x in frame]

    def invoke(args):
        return main(*args)

    def outputs(result):
        items = result if isinstance(result, (list, tuple, tvm.ir.Array)) else [result]
        return [np.asarray(r.numpy()) for r in items]

    return Runner(name, detail, feed, invoke, outputs)


LOADERS = {
    "tflite": load_tflite,
    REFERENCE_KERNELS: load_tflite_reference,
    "acl": load_acl,
    "onnxruntime": load_onnxruntime,
    "openvino": load_openvino,
}
