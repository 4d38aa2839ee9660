"""Benchmarks: figures measured side by side in one process, printed and written as JSON.

One module per suite (`kernels`, later `kv`, `costmodel`, `sched`); `refimpl bench SUITE` runs
it. Speeds are reported as ratios to baselines timed in the same run, because absolute figures
drift with the load on a shared machine.
"""
