"""Built-in single-operator workloads from the TVM paper (Table 2), as ONNX models.

Every workload is float32, batch 1, NCHW, padding (K-1)/2, with weights drawn from a
generator seeded by the workload's name, so the same name always gives the same bytes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OpSpec:
    """One operator workload: conv2d or depthwise conv2d."""

    name: str  # e.g. "conv:C2"
    kind: str  # "conv2d" or "depthwise_conv2d"
    size: int  # input H = W
    in_channels: int
    out_channels: int
    kernel: int
    stride: int

    @property
    def pad(self) -> int:
        return (self.kernel - 1) // 2

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def groups(self) -> int:
        return self.in_channels if self.kind == "depthwise_conv2d" else 1

    @property
    def input_shape(self) -> list[int]:
        return [1, self.in_channels, self.size, self.size]

    @property
    def weight_shape(self) -> list[int]:
        return [self.out_channels, self.in_channels // self.groups, self.kernel, self.kernel]

    @property
    def flops(self) -> int:
        """Multiply-adds counted as two floating-point operations."""
        macs = (
            self.out_channels
            * self.out_size**2
            * (self.in_channels // self.groups)
            * self.kernel**2
        )
        return 2 * macs

    @property
    def params(self) -> int:
        return int(np.prod(self.weight_shape))

    def short(self) -> str:
        """A compact label for narrow lists: `7x7 512->512 3x3/1`."""
        k = f"{self.kernel}x{self.kernel}/{self.stride}"
        if self.kind == "conv2d":
            return f"{self.size}x{self.size} {self.in_channels}->{self.out_channels} {k}"
        return f"{self.size}x{self.size} dw{self.in_channels} {k}"

    def describe(self) -> str:
        if self.kind == "conv2d":
            return (
                f"conv2d {self.size}x{self.size}, {self.in_channels}->{self.out_channels}, "
                f"{self.kernel}x{self.kernel}/{self.stride}"
            )
        return (
            f"depthwise conv2d {self.size}x{self.size}, {self.in_channels} ch, "
            f"{self.kernel}x{self.kernel}/{self.stride}"
        )


_CONV = {  # (H=W, IC, OC, K, stride), ResNet-18
    "C1": (224, 3, 64, 7, 2),
    "C2": (56, 64, 64, 3, 1),
    "C3": (56, 64, 64, 1, 1),
    "C4": (56, 64, 128, 3, 2),
    "C5": (56, 64, 128, 1, 2),
    "C6": (28, 128, 128, 3, 1),
    "C7": (28, 128, 256, 3, 2),
    "C8": (28, 128, 256, 1, 2),
    "C9": (14, 256, 256, 3, 1),
    "C10": (14, 256, 512, 3, 2),
    "C11": (14, 256, 512, 1, 2),
    "C12": (7, 512, 512, 3, 1),
}
_DWCONV = {  # (H=W, C, K, stride), MobileNet
    "D1": (112, 32, 3, 1),
    "D2": (112, 64, 3, 2),
    "D3": (56, 128, 3, 1),
    "D4": (56, 128, 3, 2),
    "D5": (28, 256, 3, 1),
    "D6": (28, 256, 3, 2),
    "D7": (14, 512, 3, 1),
    "D8": (14, 512, 3, 2),
    "D9": (7, 1024, 3, 1),
}

OPS: dict[str, OpSpec] = {}
for _key, (_h, _ic, _oc, _k, _s) in _CONV.items():
    OPS[f"conv:{_key}"] = OpSpec(f"conv:{_key}", "conv2d", _h, _ic, _oc, _k, _s)
for _key, (_h, _c, _k, _s) in _DWCONV.items():
    OPS[f"dwconv:{_key}"] = OpSpec(f"dwconv:{_key}", "depthwise_conv2d", _h, _c, _c, _k, _s)


def lookup(name: str) -> OpSpec | None:
    """Find a built-in by name, case-insensitively (`conv:c12` == `conv:C12`)."""
    for key, spec in OPS.items():
        if key.lower() == name.lower():
            return spec
    return None


def seeded_rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def seeded_weight(spec: OpSpec) -> np.ndarray:
    """The operator's seeded, He-scaled OIHW weight (the same for every file format)."""
    rng = seeded_rng(spec.name)
    fan_in = spec.weight_shape[1] * spec.kernel**2
    return (rng.standard_normal(spec.weight_shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def build_tflite(spec: OpSpec) -> bytes:
    """The same operator and weight as a TFLite flatbuffer (NHWC), for the TFLite baseline."""
    from tvmtui.workloads.tflite_writer import TfliteNet

    net = TfliteNet(spec.name, spec.input_shape)
    out = net.conv("input", seeded_weight(spec), None, spec.stride, spec.pad, spec.groups)
    return net.finish(out)


def build_onnx(spec: OpSpec):
    """The operator as an ONNX model with seeded, He-scaled weights."""
    from onnx import TensorProto, helper, numpy_helper

    weight = seeded_weight(spec)
    p = spec.pad
    node = helper.make_node(
        "Conv",
        ["input", "weight"],
        ["output"],
        kernel_shape=[spec.kernel, spec.kernel],
        strides=[spec.stride, spec.stride],
        pads=[p, p, p, p],
        group=spec.groups,
    )
    out_shape = [1, spec.out_channels, spec.out_size, spec.out_size]
    graph = helper.make_graph(
        [node],
        spec.name.replace(":", "_"),
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, spec.input_shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)],
        initializer=[numpy_helper.from_array(weight, "weight")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tvmtui"
    )
    model.ir_version = 8
    return model
