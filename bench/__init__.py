"""Benchmarks. Each module runs with `python -m bench.NAME`; `make bench` runs them all."""
