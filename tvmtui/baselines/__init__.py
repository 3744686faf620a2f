"""Baselines beside tuned TVM: the runtimes, timing, the parity gate and the speedup."""
