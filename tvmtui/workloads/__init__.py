"""Workloads: the built-in zoo, loading a user's model file, and the graph hash."""

from tvmtui.workloads.loader import Workload, load_workload, parse_shapes

__all__ = ["Workload", "load_workload", "parse_shapes"]
