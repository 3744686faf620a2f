"""What a `.tflite` flatbuffer declares: its inputs, its operators, and which of them TVM's
TFLite frontend cannot import."""

from __future__ import annotations


def declared_inputs(subgraph) -> list[tuple[str, list]]:
    """(name, dims) of the subgraph's inputs, from the shape signature where there is one
    (-1 for a dynamic dim)."""
    out = []
    for idx in subgraph.InputsAsNumpy():
        tensor = subgraph.Tensors(int(idx))
        sig = tensor.ShapeSignatureAsNumpy() if tensor.ShapeSignatureLength() else None
        out.append((tensor.Name().decode(),
                    [int(d) for d in (sig if sig is not None else tensor.ShapeAsNumpy())]))
    return out


def operators(model, subgraph) -> list[tuple[str, str]]:
    """(operator name, name of the tensor it produces) for every operator, in order."""
    from tflite.BuiltinOperator import BuiltinOperator

    names = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
    out = []
    for i in range(subgraph.OperatorsLength()):
        op = subgraph.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        value = max(code.DeprecatedBuiltinCode(), code.BuiltinCode())
        produced = subgraph.Tensors(int(op.Outputs(0))).Name().decode() if op.OutputsLength() else "?"
        name = names.get(value, f"BUILTIN_{value}")
        if value == BuiltinOperator.CUSTOM:  # named as the frontend does
            custom = (code.CustomCode() or b"?").decode(errors="replace")
            name = "DETECTION_POSTPROCESS" if custom == "TFLite_Detection_PostProcess" else \
                f"CUSTOM {custom}"
        out.append((name, produced))
    return out


def refused_operators(model, subgraph, ops) -> tuple[list[str], list[str]]:
    """Operators the frontend has no converter for, and quantized (or dynamic-range
    quantized) operators it refuses: each as `NAME (operator #i -> tensor T)`."""
    from tvmtui.graph.relax_import import tflite_converter

    # tvmtui's converter, as the import uses: it takes the int8 PAD and TRANSPOSE that the
    # TFLite converter writes into int8 models, which TVM's stock one refuses
    conv = tflite_converter()(model, subgraph, None, None)
    missing: dict[str, list[str]] = {}
    quantized: dict[str, list[str]] = {}
    for i, (name, produced) in enumerate(ops):
        where = f"operator #{i} -> tensor {produced}"
        if name not in conv.convert_map:
            missing.setdefault(name, []).append(where)
            continue
        op = subgraph.Operators(i)
        ins, outs = conv.get_input_tensors(op), conv.get_output_tensors(op)
        q_in = sum(t.qnn_params is not None for t in ins[:1])
        q_w = sum(t.qnn_params is not None for t in ins[1:])
        q_out = sum(t.qnn_params is not None for t in outs)
        if q_in + q_w + q_out and name not in conv._SUPPORTED_QUANTIZED_OPS:
            quantized.setdefault(name, []).append(where)
        elif q_w and not q_in and not q_out:
            quantized.setdefault(f"{name} [dynamic-range quantized]", []).append(where)

    def grouped(found: dict[str, list[str]]) -> list[str]:
        return [f"{name} ({places[0]}{f', +{len(places) - 1} more' if len(places) > 1 else ''})"
                for name, places in found.items()]

    return grouped(missing), grouped(quantized)
