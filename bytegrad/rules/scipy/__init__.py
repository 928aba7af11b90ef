"""Rules for SciPy: `special.py`, `stats.py`, `linalg.py`, `signal.py`.

scipy is optional and bytegrad never imports it: `registry.load_lazy_rules` imports each of these
modules once the program has imported the scipy module it covers (on a registry miss or a rewrite).
This package itself imports nothing.
"""
