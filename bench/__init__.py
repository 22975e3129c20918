"""tiermem benchmarks: run with `python -m bench <name>` (see BENCHMARKS.md)."""
