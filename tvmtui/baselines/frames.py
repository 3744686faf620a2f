"""Input frames for the parity gate: seeded random tensors, or the user's `.npy` files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tvmtui.baselines.model import BenchModel
from tvmtui.core.errors import UserError


def seeded_frames(model: BenchModel, count: int, seed: int = 0) -> list[list[np.ndarray]]:
    """`count` frames; frame i draws from a generator seeded with `seed + i`."""
    frames = []
    for i in range(count):
        rng = np.random.default_rng(seed + i)
        frame = []
        for name, shape in model.input_shapes.items():
            dtype = np.dtype(model.input_dtypes[name])
            if dtype.kind == "f":
                frame.append(rng.standard_normal(shape).astype(dtype))
            else:
                frame.append(rng.integers(0, 10, size=shape).astype(dtype))
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
