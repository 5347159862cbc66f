"""Tooling, not runtime: `pzasync bench` (harness.py: async against sequential and the bare loops on the
same work; report.py: tables and plots) and `pzasync microbench` (bench/microbench.py)."""
