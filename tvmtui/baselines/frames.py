"""Input frames for the parity gate: seeded random tensors in the range each input expects,
or the user's `.npy` files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tvmtui.baselines.model import BenchModel
from tvmtui.core.errors import UserError


@dataclass(frozen=True)
class InputRange:
    """What one input's seeded values are drawn from, and why."""

    low: float | None  # None: a standard normal
    high: float | None
    why: str

    def text(self, name: str) -> str:
        what = "N(0, 1)" if self.low is None else f"uniform [{self.low:g}, {self.high:g}]"
        return f"{name}: {what} ({self.why})"


def input_ranges(model: BenchModel) -> dict[str, InputRange]:
    """The range each input expects: a quantized input's representable values, the range a
    float input's QUANTIZE can hold, [0, 1] for an image (rank 4, 1, 3 or 4 channels); a
    standard normal for anything else (features, embeddings, audio, latents)."""
    quantized = _tflite_input_quantization(model) if model.native == "tflite" else {}
    out = {}
    for name, shape in model.input_shapes.items():
        dtype = np.dtype(model.input_dtypes[name])
        if name in quantized:
            out[name] = quantized[name]
        elif dtype.kind in "iu":
            out[name] = InputRange(0, 9, "integers")
        elif _is_image(shape, model.native):
            out[name] = InputRange(0.0, 1.0, "an image")
        else:
            out[name] = InputRange(None, None, "not an image")
    return out


def _is_image(shape: list[int], native: str) -> bool:
    if len(shape) != 4:
        return False
    channels, spatial = (shape[3], shape[1:3]) if native == "tflite" else (shape[1], shape[2:])
    return channels in (1, 3, 4) and min(spatial) >= 8


def _tflite_input_quantization(model: BenchModel) -> dict[str, InputRange]:
    """TFLite inputs with a quantization: int8 / uint8 inputs over their whole type, and
    float inputs a QUANTIZE reads over what its scale and zero point can represent."""
    import tflite
    from tflite.BuiltinOperator import BuiltinOperator
    from tflite.TensorType import TensorType

    reader = tflite.Model.GetRootAsModel(model.files["tflite"], 0)
    sub = reader.Subgraphs(0)
    quantized_by: dict[int, int] = {}  # input tensor -> the QUANTIZE output reading it
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        code = reader.OperatorCodes(op.OpcodeIndex())
        if max(code.DeprecatedBuiltinCode(), code.BuiltinCode()) == BuiltinOperator.QUANTIZE:
            quantized_by[int(op.Inputs(0))] = int(op.Outputs(0))
    out = {}
    for idx in (int(i) for i in sub.InputsAsNumpy()):
        tensor = sub.Tensors(idx)
        integer = tensor.Type() in (TensorType.INT8, TensorType.UINT8)
        held = tensor if integer else sub.Tensors(quantized_by[idx]) if idx in quantized_by \
            else None
        q = held.Quantization() if held is not None else None
        if held is None or q is None or q.ScaleLength() != 1:
            continue
        info = np.iinfo(np.uint8 if held.Type() == TensorType.UINT8 else np.int8)
        name = tensor.Name().decode()
        if integer:
            out[name] = InputRange(int(info.min), int(info.max), "its integer type")
        else:
            scale, zero = float(q.Scale(0)), int(q.ZeroPoint(0)) if q.ZeroPointLength() else 0
            out[name] = InputRange(scale * (info.min - zero), scale * (info.max - zero),
                                   "what its QUANTIZE holds")
    return out


def describe(model: BenchModel) -> str:
    """How the seeded frames are drawn, input by input, for the report."""
    return "; ".join(r.text(name) for name, r in input_ranges(model).items())


def seeded_frames(model: BenchModel, count: int, seed: int = 0) -> list[list[np.ndarray]]:
    """`count` frames in the range each input expects (`input_ranges`); frame i draws from
    a generator seeded with `seed + i`."""
    ranges = input_ranges(model)
    frames = []
    for i in range(count):
        rng = np.random.default_rng(seed + i)
        frame = []
        for name, shape in model.input_shapes.items():
            dtype = np.dtype(model.input_dtypes[name])
            r = ranges[name]
            if dtype.kind in "iu":
                assert r.low is not None and r.high is not None
                frame.append(rng.integers(int(r.low), int(r.high) + 1, size=shape).astype(dtype))
            elif r.low is None:
                frame.append(rng.standard_normal(shape).astype(dtype))
            else:
                assert r.high is not None
                frame.append(rng.uniform(r.low, r.high, size=shape).astype(dtype))
        frames.append(frame)
    return frames


def folder_frames(model: BenchModel, folder: Path, count: int) -> list[list[np.ndarray]]:
    """Frames from `folder`: one `.npy` per frame for a one-input model, or one `.npz` per
    frame holding every input by name; sorted by file name, at most `count`."""
    if not folder.is_dir():
        raise UserError(f"--inputs {folder}: not a folder of .npy / .npz frames")
    names = list(model.input_shapes)
    files = sorted(p for p in folder.iterdir() if p.suffix in (".npy", ".npz"))
    if not files:
        raise UserError(f"--inputs {folder} holds no .npy or .npz files")
    frames = []
    for path in files[:count]:
        try:
            if path.suffix == ".npy":
                if len(names) != 1:
                    raise UserError(
                        f"{path.name}: the model has {len(names)} inputs ({', '.join(names)}); "
                        "give one .npz per frame with an array per input name"
                    )
                arrays = {names[0]: np.load(path, allow_pickle=False)}
            else:
                with np.load(path, allow_pickle=False) as npz:
                    arrays = {k: npz[k] for k in npz.files}
        except (ValueError, OSError) as exc:
            raise UserError(f"cannot read input frame {path}: {exc}") from None
        frame = []
        for name in names:
            if name not in arrays:
                raise UserError(f"{path.name} has no array for input {name!r}")
            x = arrays[name]
            want = model.input_shapes[name]
            if list(x.shape) != want:
                raise UserError(
                    f"{path.name}: input {name!r} has shape {list(x.shape)}, the model wants {want}"
                )
            frame.append(x.astype(model.input_dtypes[name], copy=False))
        frames.append(frame)
    return frames
