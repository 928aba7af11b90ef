"""Hypothesis profiles, chosen by the BYTEGRAD_HYPOTHESIS_PROFILE environment variable.

`ci` (the default) keeps the random-program test to a bounded number of examples so the suite
stays fast, and derandomized, so that the gate CI runs is the same every time (a random failure
would be found by `make test-long`, not by a flaky CI); `long` (used by `make test-long`) tries many more programs, BYTEGRAD_LONG_EXAMPLES of
them (20000 unless set), and prints how many it tried.
"""
import os

# The checking mode (bytegrad/runtime/monitor.py): every site the rewrite leaves alone checks that
# no differentiated value reaches it, and Python code started blind from C with one raises, so
# every test also tests the activity analysis. Set before bytegrad is imported (it reads it once).
os.environ.setdefault("BYTEGRAD_CHECK", "1")

from hypothesis import settings

settings.register_profile("ci", max_examples=40, derandomize=True)
settings.register_profile("long", max_examples=int(os.environ.get("BYTEGRAD_LONG_EXAMPLES", "20000")))
settings.load_profile(os.environ.get("BYTEGRAD_HYPOTHESIS_PROFILE", "ci"))

# The on-disk caches (bytegrad/diskcache.py) must never write into the user's real cache
# directory: this test process, and every subprocess it starts, uses a fresh private one.
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

_TEST_CACHE_DIR = tempfile.mkdtemp(prefix="bytegrad-test-cache-")
os.environ["BYTEGRAD_CACHE_DIR"] = _TEST_CACHE_DIR
atexit.register(shutil.rmtree, _TEST_CACHE_DIR, True)
import bytegrad  # noqa: E402

bytegrad.config.cache_dir = _TEST_CACHE_DIR  # (in case a plugin imported bytegrad before the line above)


# Tests of the general path's own machinery (rewrite and kernel caches, fused sites tiering up,
# what a warm process imports) pin the general path: under BYTEGRAD_TIER=numpy a compiled program
# would take their gradients after the first. Mark them `general_path` (also for subprocesses).
import pytest  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "general_path: run with BYTEGRAD_TIER=general (tests of the general path's own machinery)")


@pytest.fixture(autouse=True)
def _pin_general_path(request, monkeypatch):
    if request.node.get_closest_marker("general_path") is not None:
        monkeypatch.setattr(bytegrad.config, "tier", "general")
        monkeypatch.setenv("BYTEGRAD_TIER", "general")  # (for subprocesses)
    yield


def pytest_sessionfinish(session, exitstatus):
    """The programs `auto` captured are written at exit (compiled/store.py `later`): the session's cache
    directory is removed then, so this process does not spend its exit writing them."""
    import sys

    store = sys.modules.get("bytegrad.compiled.store")
    if store is not None:
        store.PENDING.clear()


def pytest_terminal_summary(terminalreporter):
    """`make test-long` reports how many random programs it tried and how many failed."""
    import sys

    props = sys.modules.get("tests.test_properties") or sys.modules.get("test_properties")
    if props is not None and props.STATS["tried"]:
        terminalreporter.write_line(f"random programs: {props.STATS['tried']} tried, {props.STATS['failed']} failed")


@pytest.fixture
def disk(tmp_path, monkeypatch):
    """The disk cache on, in a new directory (returned), with nothing remembered before or after the test."""
    import bytegrad
    from bytegrad import diskcache
    from bytegrad.transform import cache

    path = tmp_path / "cache"
    monkeypatch.setattr(bytegrad.config, "cache_dir", str(path))
    monkeypatch.setattr(bytegrad.config, "disable_disk_cache", False)
    diskcache._reset_for_tests()
    cache.clear()
    yield path
    diskcache._reset_for_tests()
    cache.clear()
