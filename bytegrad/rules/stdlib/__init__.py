"""Rules for standard-library modules that `import numpy` does not import: `statistics.py`,
`heapq.py`, `bisect.py`.

bytegrad does not import these modules either: `registry.load_lazy_rules` imports each rules module
once the program has imported the module it covers (on a registry miss, a call without a rule, or a
rewrite), as for scipy's. This package itself imports nothing.
"""
