"""tiermem benchmarks: run with `python -m bench <name>` (the names: bench/__main__.py) or `python -m bench all`."""
