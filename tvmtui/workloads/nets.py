"""The TVM paper's five networks, each written once against a small layer API.

A network function draws its weights from a seeded generator (PyTorch conventions: NCHW
activations, OIHW kernels) and calls layer methods on a `NetBuilder`. The ONNX writer
below implements that API; a TFLite writer can implement the same calls, so both files
come from one definition with identical weights. The builder also counts multiply-adds
and parameters, which the workload cards report.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tvmtui.core.paths import zoo_dir
from tvmtui.workloads.builtin import seeded_rng
from tvmtui.workloads.netstats import NetStats


class OnnxNet:
    """Builds an ONNX graph from layer calls; tensors are names, weights initializers."""

    def __init__(self, name: str, input_shape: list[int]):
        self.name = name
        self.nodes: list = []
        self.inits: list = []
        self.shapes: dict[str, list[int]] = {"input": list(input_shape)}
        self.stats = NetStats()
        self._n = 0

    # ---- plumbing ---------------------------------------------------------------
    def _fresh(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n}"

    def _const(self, array: np.ndarray, prefix: str) -> str:
        from onnx import numpy_helper

        name = self._fresh(prefix)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def _node(self, op: str, inputs: list[str], out_shape: list[int], **attrs) -> str:
        from onnx import helper

        out = self._fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        self.shapes[out] = out_shape
        return out

    def _param(self, *arrays: np.ndarray) -> None:
        self.stats.params += sum(int(a.size) for a in arrays)

    # ---- layers -------------------------------------------------------------------
    def conv(self, x: str, w: np.ndarray, b: np.ndarray | None, stride: int = 1,
             pad: int = 0, groups: int = 1) -> str:
        n, c, h, wd = self.shapes[x]
        o, _, k, _ = w.shape
        oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
        inputs = [x, self._const(w, "w")] + ([self._const(b, "b")] if b is not None else [])
        self._param(w, *([b] if b is not None else []))
        self.stats.macs += o * oh * ow * (c // groups) * k * k
        self.stats.layers.append(f"conv {k}x{k}/{stride} {c}->{o}" + (" dw" if groups > 1 else ""))
        return self._node("Conv", inputs, [n, o, oh, ow], kernel_shape=[k, k],
                          strides=[stride, stride], pads=[pad] * 4, group=groups)

    def conv_transpose(self, x: str, w: np.ndarray, stride: int, pad: int) -> str:
        """`w` is (in, out, k, k) as in ONNX/PyTorch; no bias (BatchNorm follows)."""
        n, c, h, wd = self.shapes[x]
        _, o, k, _ = w.shape
        oh, ow = (h - 1) * stride - 2 * pad + k, (wd - 1) * stride - 2 * pad + k
        self._param(w)
        self.stats.macs += c * h * wd * o * k * k
        self.stats.layers.append(f"conv_transpose {k}x{k}/{stride} {c}->{o}")
        return self._node("ConvTranspose", [x, self._const(w, "w")], [n, o, oh, ow],
                          kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)

    def batch_norm(self, x: str, gamma, beta, mean, var, eps: float = 1e-5) -> str:
        self._param(gamma, beta, mean, var)
        ins = [x] + [self._const(a.astype(np.float32), "bn") for a in (gamma, beta, mean, var)]
        return self._node("BatchNormalization", ins, self.shapes[x], epsilon=eps)

    def relu(self, x: str) -> str:
        return self._node("Relu", [x], self.shapes[x])

    def relu6(self, x: str) -> str:
        lo, hi = self._const(np.float32(0.0), "c"), self._const(np.float32(6.0), "c")
        return self._node("Clip", [x, lo, hi], self.shapes[x])

    def tanh(self, x: str) -> str:
        return self._node("Tanh", [x], self.shapes[x])

    def sigmoid(self, x: str) -> str:
        return self._node("Sigmoid", [x], self.shapes[x])

    def add(self, a: str, b: str) -> str:
        return self._node("Add", [a, b], self.shapes[a])

    def mul(self, a: str, b: str) -> str:
        return self._node("Mul", [a, b], self.shapes[a])

    def max_pool(self, x: str, k: int, stride: int, pad: int) -> str:
        n, c, h, w = self.shapes[x]
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        self.stats.layers.append(f"max_pool {k}x{k}/{stride}")
        return self._node("MaxPool", [x], [n, c, oh, ow], kernel_shape=[k, k],
                          strides=[stride, stride], pads=[pad] * 4)

    def global_avg_pool(self, x: str) -> str:
        n, c, _, _ = self.shapes[x]
        pooled = self._node("GlobalAveragePool", [x], [n, c, 1, 1])
        return self.flatten(pooled)

    def flatten(self, x: str) -> str:
        shape = self.shapes[x]
        return self._node("Flatten", [x], [shape[0], int(np.prod(shape[1:]))], axis=1)

    def reshape(self, x: str, shape: list[int]) -> str:
        target = self._const(np.array(shape, dtype=np.int64), "shape")
        return self._node("Reshape", [x, target], list(shape))

    def dense(self, x: str, w: np.ndarray, b: np.ndarray | None) -> str:
        """`w` is (out, in), as in PyTorch's Linear."""
        n, k = self.shapes[x]
        out = w.shape[0]
        self._param(w, *([b] if b is not None else []))
        self.stats.macs += n * k * out
        self.stats.layers.append(f"dense {k}->{out}")
        inputs = [x, self._const(w, "w")] + ([self._const(b, "b")] if b is not None else [])
        return self._node("Gemm", inputs, [n, out], transB=1)

    def slice_cols(self, x: str, start: int, end: int) -> str:
        n, _ = self.shapes[x]
        s = self._const(np.array([start], dtype=np.int64), "s")
        e = self._const(np.array([end], dtype=np.int64), "e")
        ax = self._const(np.array([1], dtype=np.int64), "ax")
        return self._node("Slice", [x, s, e, ax], [n, end - start])

    def slice_rows(self, x: str, row: int) -> str:
        _, k = self.shapes[x]
        s = self._const(np.array([row], dtype=np.int64), "s")
        e = self._const(np.array([row + 1], dtype=np.int64), "e")
        ax = self._const(np.array([0], dtype=np.int64), "ax")
        return self._node("Slice", [x, s, e, ax], [1, k])

    def concat_cols(self, a: str, b: str) -> str:
        n, ka = self.shapes[a]
        return self._node("Concat", [a, b], [n, ka + self.shapes[b][1]], axis=1)

    # ---- output -----------------------------------------------------------------------
    def finish(self, out: str):
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes,
            self.name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, self.shapes["input"])],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, self.shapes[out])],
            initializer=self.inits,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tvmtui"
        )
        model.ir_version = 8
        return model


# ---- weight helpers ---------------------------------------------------------------------
def _he(rng, shape, fan_in) -> np.ndarray:
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def _classifier(rng, classes: int, features: int) -> np.ndarray:
    """Small final weights, so random-weight logits stay O(1) like a trained net's."""
    return (rng.standard_normal((classes, features)) * 0.5 / features).astype(np.float32)


def _bn(net, x, rng, c):
    gamma = (1.0 + 0.1 * rng.standard_normal(c)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(c)).astype(np.float32)
    mean = (0.1 * rng.standard_normal(c)).astype(np.float32)
    var = (1.0 + 0.1 * rng.random(c)).astype(np.float32)
    return net.batch_norm(x, gamma, beta, mean, var)


def _conv_bn_relu(net, x, rng, cin, cout, k, stride, pad, groups=1, relu=True):
    w = _he(rng, (cout, cin // groups, k, k), (cin // groups) * k * k)
    y = _bn(net, net.conv(x, w, None, stride, pad, groups), rng, cout)
    return net.relu(y) if relu else y


# ---- the five networks ----------------------------------------------------------------
def resnet18(net, rng):
    """ImageNet ResNet-18 (BatchNorm kept as separate layers), 3x224x224 -> 1000."""
    x = _conv_bn_relu(net, "input", rng, 3, 64, 7, 2, 3)
    x = net.max_pool(x, 3, 2, 1)
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            y = _conv_bn_relu(net, x, rng, cin, cout, 3, s, 1)
            y = _conv_bn_relu(net, y, rng, cout, cout, 3, 1, 1, relu=False)
            short = x
            if s != 1 or cin != cout:
                short = _conv_bn_relu(net, x, rng, cin, cout, 1, s, 0, relu=False)
            x = net.relu(net.add(y, short))
            cin = cout
    x = net.global_avg_pool(x)
    return net.dense(x, _classifier(rng, 1000, 512), np.zeros(1000, np.float32))


def mobilenet(net, rng):
    """MobileNet v1 1.0-224: depthwise-separable blocks with BatchNorm + ReLU6."""

    def block(x, cin, cout, stride):
        dw = _he(rng, (cin, 1, 3, 3), 9)
        x = net.relu6(_bn(net, net.conv(x, dw, None, stride, 1, groups=cin), rng, cin))
        pw = _he(rng, (cout, cin, 1, 1), cin)
        return net.relu6(_bn(net, net.conv(x, pw, None, 1, 0), rng, cout))

    x = net.relu6(_bn(net, net.conv("input", _he(rng, (32, 3, 3, 3), 27), None, 2, 1), rng, 32))
    plan = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1),
            (256, 512, 2)] + [(512, 512, 1)] * 5 + [(512, 1024, 2), (1024, 1024, 1)]
    for cin, cout, stride in plan:
        x = block(x, cin, cout, stride)
    x = net.global_avg_pool(x)
    return net.dense(x, _classifier(rng, 1000, 1024), np.zeros(1000, np.float32))


DQN_ACTIONS = 18


def dqn(net, rng):
    """Nature DQN: 4x84x84 -> conv 32 8x8/4, 64 4x4/2, 64 3x3/1 -> FC 512 -> 18 actions."""
    x = "input"
    for cin, cout, k, s in ((4, 32, 8, 4), (32, 64, 4, 2), (64, 64, 3, 1)):
        x = net.relu(net.conv(x, _he(rng, (cout, cin, k, k), cin * k * k),
                              (0.01 * rng.standard_normal(cout)).astype(np.float32), s, 0))
    x = net.flatten(x)
    x = net.relu(net.dense(x, _he(rng, (512, 3136), 3136), np.zeros(512, np.float32)))
    return net.dense(x, _he(rng, (DQN_ACTIONS, 512), 512), np.zeros(DQN_ACTIONS, np.float32))


def dcgan(net, rng):
    """DCGAN generator: 100-d noise -> 4x4x512 -> ... -> 64x64x3, BatchNorm+ReLU, Tanh."""
    x = net.reshape("input", [1, 100, 1, 1])
    plan = [(100, 512, 1, 0), (512, 256, 2, 1), (256, 128, 2, 1), (128, 64, 2, 1)]
    for cin, cout, stride, pad in plan:
        w = (0.02 * rng.standard_normal((cin, cout, 4, 4))).astype(np.float32)
        x = net.relu(_bn(net, net.conv_transpose(x, w, stride, pad), rng, cout))
    w = (0.02 * rng.standard_normal((64, 3, 4, 4))).astype(np.float32)
    return net.tanh(net.conv_transpose(x, w, 2, 1))


LSTM_HIDDEN, LSTM_STEPS, LSTM_LAYERS = 128, 8, 2


def lstm(net, rng):
    """A 2-layer LSTM language model, written out step by step (no LSTM op).

    Input: the embeddings of LSTM_STEPS words, (steps, hidden); output: the last step's
    logits over a 10,000-word vocabulary. Gates use MatMul, Sigmoid, Tanh, Mul and Add.
    """
    h_dim = LSTM_HIDDEN
    cells = []
    for _ in range(LSTM_LAYERS):
        w = (rng.standard_normal((4 * h_dim, 2 * h_dim)) / np.sqrt(2 * h_dim)).astype(np.float32)
        b = (0.1 * rng.standard_normal(4 * h_dim)).astype(np.float32)
        cells.append((w, b))
    zeros = net._const(np.zeros((1, h_dim), np.float32), "zero")
    net.shapes[zeros] = [1, h_dim]
    h = [zeros] * LSTM_LAYERS
    c = [zeros] * LSTM_LAYERS
    steps = net.reshape("input", [LSTM_STEPS, h_dim])
    for t in range(LSTM_STEPS):
        x = net.reshape(net.slice_rows(steps, t), [1, h_dim])
        for layer, (w, b) in enumerate(cells):
            xh = net.concat_cols(x, h[layer])
            gates = net.dense(xh, w, b)
            i = net.sigmoid(net.slice_cols(gates, 0, h_dim))
            f = net.sigmoid(net.slice_cols(gates, h_dim, 2 * h_dim))
            g = net.tanh(net.slice_cols(gates, 2 * h_dim, 3 * h_dim))
            o = net.sigmoid(net.slice_cols(gates, 3 * h_dim, 4 * h_dim))
            c[layer] = net.add(net.mul(f, c[layer]), net.mul(i, g))
            h[layer] = net.mul(o, net.tanh(c[layer]))
            x = h[layer]
    vocab = 10000
    return net.dense(x, _he(rng, (vocab, h_dim), h_dim), np.zeros(vocab, np.float32))


@dataclass(frozen=True)
class NetSpec:
    name: str
    build: Callable
    input_shape: list[int]
    description: str
    short: str  # for narrow lists


NETS: dict[str, NetSpec] = {
    "resnet18": NetSpec("resnet18", resnet18, [1, 3, 224, 224], "ImageNet ResNet-18",
                        "ResNet-18 3x224x224"),
    "mobilenet": NetSpec("mobilenet", mobilenet, [1, 3, 224, 224], "MobileNet v1 1.0-224",
                         "MobileNet v1 3x224x224"),
    "lstm": NetSpec("lstm", lstm, [LSTM_STEPS, LSTM_HIDDEN],
                    f"{LSTM_LAYERS}-layer LSTM LM, hidden {LSTM_HIDDEN}, {LSTM_STEPS} steps",
                    f"LSTM {LSTM_LAYERS}x{LSTM_HIDDEN}, {LSTM_STEPS} steps"),
    "dqn": NetSpec("dqn", dqn, [1, 4, 84, 84], "Nature DQN, 18 actions",
                   "DQN 4x84x84, 18 actions"),
    "dcgan": NetSpec("dcgan", dcgan, [1, 100], "DCGAN generator, 100-d noise to 64x64x3",
                     "DCGAN 100 -> 3x64x64"),
}


def _generator_key() -> str:
    """Content hash of everything that determines the generated bytes."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in ("nets.py", "tflite_writer.py", "builtin.py", "../graph/tflite_schema.py"):
        h.update((here / name).read_bytes())
    h.update(np.__version__.encode())
    return h.hexdigest()[:16]


def _cached(spec: NetSpec) -> tuple[Path, Path, Path]:
    """The network's `.onnx`, `.tflite` and stats `.json`, generated once per generator
    version (the JSON is written last, so its presence means all three are complete)."""
    folder = zoo_dir() / _generator_key()
    paths = tuple(folder / f"{spec.name}.{ext}" for ext in ("onnx", "tflite", "json"))
    if not paths[2].exists():
        folder.mkdir(parents=True, exist_ok=True)
        model, stats = build_onnx_net(spec)
        for path, data in (
            (paths[0], model.SerializeToString(deterministic=True)),
            (paths[1], build_tflite_net(spec)[0]),
            (paths[2], json.dumps(asdict(stats)).encode()),
        ):
            tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
    return paths[0], paths[1], paths[2]


def network_files(spec: NetSpec) -> tuple[Path, Path]:
    """The network's generated `.onnx` and `.tflite` files (cached)."""
    onnx_path, tflite_path, _ = _cached(spec)
    return onnx_path, tflite_path


def build_tflite_net(spec: NetSpec) -> tuple[bytes, NetStats]:
    """The same network, same weights, as a TFLite flatbuffer (NHWC activations)."""
    from tvmtui.workloads.tflite_writer import TfliteNet

    net = TfliteNet(spec.name, spec.input_shape)
    out = spec.build(net, seeded_rng(f"net:{spec.name}"))
    return net.finish(out), net.stats


def count(spec: NetSpec) -> NetStats:
    """Multiply-adds, parameters and layers (from the cache; generated with the files)."""
    return NetStats(**json.loads(_cached(spec)[2].read_text()))


def build_onnx_net(spec: NetSpec):
    """The network as an ONNX model, plus its multiply-add and parameter counts."""
    net = OnnxNet(spec.name, spec.input_shape)
    out = spec.build(net, seeded_rng(f"net:{spec.name}"))
    return net.finish(out), net.stats
