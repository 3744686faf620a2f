"""The TFLite interpreter: LiteRT first, tflite-runtime second (the package on many boards)."""

from __future__ import annotations

from tvmtui.core.errors import UserError


def make_interpreter(model: bytes, threads: int | None = None):
    """An interpreter for TFLite bytes, from `ai_edge_litert` or else `tflite_runtime`."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        try:
            from tflite_runtime.interpreter import Interpreter
        except ImportError:
            raise UserError(
                "no TFLite interpreter: pip install ai-edge-litert (or tflite-runtime)"
            ) from None
    try:
        return Interpreter(model_content=model, num_threads=threads)
    except (ImportError, AttributeError) as exc:
        # tflite-runtime 2.14 is built against numpy 1.x and fails here under numpy 2.
        raise UserError(
            f"the TFLite interpreter failed to load ({exc}); tflite-runtime needs numpy<2, "
            "LiteRT (pip install ai-edge-litert) works with numpy 2"
        ) from None
