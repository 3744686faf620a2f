"""TFLite's flatbuffer schema, as LiteRT ships its generated object API: what reads, edits
and writes `.tflite` bytes here without TensorFlow (the zoo's writer, the int8 twins, the
import layer's normalization)."""

from __future__ import annotations


def schema():
    """The schema module: LiteRT's, or tflite-runtime's on a board without LiteRT."""
    try:
        from ai_edge_litert import schema_py_generated as schema
    except ImportError:  # pragma: no cover - boards with only tflite-runtime
        from tflite_runtime import schema_py_generated as schema
    return schema


def opcode_index(S, model, name: str) -> int:
    """The index of builtin operator `name` in a ModelT's operator codes (added if new)."""
    code = getattr(S.BuiltinOperator, name)
    for i, oc in enumerate(model.operatorCodes):
        if oc.builtinCode == code:
            return i
    oc = S.OperatorCodeT()
    oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
    model.operatorCodes.append(oc)
    return len(model.operatorCodes) - 1


def pack_model(model, size_hint: int = 1 << 20) -> bytes:
    """A ModelT (the schema's object API) as TFLite flatbuffer bytes."""
    import flatbuffers

    builder = flatbuffers.Builder(size_hint)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
