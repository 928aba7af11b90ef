"""Hypothesis profiles, chosen by the BYTEGRAD_HYPOTHESIS_PROFILE environment variable.

`ci` (the default) keeps the random-program test to a bounded number of examples so the suite
stays fast; `long` (used by `make test-long`) tries many more programs, BYTEGRAD_LONG_EXAMPLES of
them (20000 unless set), and prints how many it tried.
"""
import os

from hypothesis import settings

settings.register_profile("ci", max_examples=40)
settings.register_profile("long", max_examples=int(os.environ.get("BYTEGRAD_LONG_EXAMPLES", "20000")))
settings.load_profile(os.environ.get("BYTEGRAD_HYPOTHESIS_PROFILE", "ci"))
