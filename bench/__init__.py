"""bytegrad benchmarks: `python -m bench.core` (see bench/core.py)."""
