"""The one path from a model file to a Relax module ready to tune, export or bench.

`relax_import` turns ONNX / TFLite bytes into Relax; `variants` rewrites the graph for a
layout or algorithm (blocked NCHW[x]c, Winograd) and legalizes it. Tuning, export and the
bench all go through `variants.prepare`, so they compile exactly the same graph and the
tuning database's keys match.
"""
