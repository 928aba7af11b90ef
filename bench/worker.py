"""Worker processes, for systems that must be set up before their library is imported.

`BYTEGRAD_DISABLE_NUMBA=1` is read when bytegrad loads, so "bytegrad (no numba)" cannot share
the benchmark's process with plain "bytegrad". It runs in a worker started with that variable:

    parent:  fn = Remote.prepare("bytegrad", {"BYTEGRAD_DISABLE_NUMBA": "1"}, case, params, data, direction)
             fn()               # one call in the worker; its result comes back pickled
             fn.time_calls(n)   # seconds per call over n back-to-back calls, timed inside the worker
    worker:  python -m bench.worker   (pickled requests on stdin, pickled replies on stdout)

The parent keeps one worker per (system, environment) for the whole run and sends it each case's
inputs, so a batch in the worker is timed exactly like a batch in the parent (after a garbage
collection; the parent pauses before it as before any other batch).
"""
from __future__ import annotations

import atexit
import gc
import os
import pickle
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any, BinaryIO

REPO = Path(__file__).resolve().parent.parent


class RemoteError(Exception):
    """An exception raised in the worker; `remote_type` is its class name there."""

    def __init__(self, remote_type: str, message: str, trace: str) -> None:
        super().__init__(message)
        self.remote_type = remote_type
        self.remote_traceback = trace


def _send(stream: BinaryIO, obj: Any) -> None:
    pickle.dump(obj, stream, protocol=pickle.HIGHEST_PROTOCOL)
    stream.flush()


# ------------------------------------------------------------------------------ parent side
class _Worker:
    def __init__(self, env: dict[str, str]) -> None:
        child_env = dict(os.environ)
        child_env.update(env)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), child_env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.worker"], cwd=REPO, env=child_env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def request(self, *message: Any) -> Any:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the benchmark worker exited with status {self.proc.returncode}")
        assert self.proc.stdin is not None and self.proc.stdout is not None
        _send(self.proc.stdin, message)
        try:
            status, *reply = pickle.load(self.proc.stdout)
        except EOFError:
            raise RuntimeError(f"the benchmark worker died (status {self.proc.wait()})") from None
        if status == "ok":
            return reply[0]
        if status == "unavailable":
            from bench.systems import Unavailable
            raise Unavailable(reply[0])
        raise RemoteError(*reply)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


_workers: dict[tuple[str, tuple[tuple[str, str], ...]], _Worker] = {}


@atexit.register
def close_all() -> None:
    while _workers:
        _workers.popitem()[1].close()


class Remote:
    """A prepared function that runs in a worker process."""

    def __init__(self, worker: _Worker) -> None:
        self._worker = worker

    @classmethod
    def prepare(cls, system: str, env: dict[str, str], case: Any, params: Any, data: tuple[Any, ...],
                direction: str) -> "Remote":
        key = (system, tuple(sorted(env.items())))
        worker = _workers.get(key)
        if worker is None or worker.proc.poll() is not None:
            worker = _workers[key] = _Worker(env)
        worker.request("prepare", system, case.key, params, data, direction)
        return cls(worker)

    @classmethod
    def alone(cls, system: str, case: Any, params: Any, data: tuple[Any, ...], direction: str) -> "Remote":
        """`system` prepared in a fresh worker of its own, with nothing else loaded (bench.alone).

        The worker is not kept for reuse: `close()` it when done.
        """
        remote = cls(_Worker({}))
        try:
            remote._worker.request("prepare", system, case.key, params, data, direction)
        except BaseException:
            remote.close()
            raise
        return remote

    def __call__(self) -> Any:
        return self._worker.request("call")

    def time_calls(self, n: int) -> float:
        return self._worker.request("time", n)

    def calibrate(self, batch_s: float) -> int:
        """`harness.calibrate` of the prepared function, run in the worker."""
        return self._worker.request("calibrate", batch_s)

    def close(self) -> None:
        self._worker.close()


# ------------------------------------------------------------------------------ worker side
def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    from bench import harness
    from bench.cases import CASES
    from bench.systems import SYSTEMS, Unavailable

    cases = {c.key: c for c in CASES}
    systems = {s.name: s for s in SYSTEMS}
    fn = None
    while True:
        try:
            message = pickle.load(requests)
        except EOFError:
            return
        try:
            if message[0] == "prepare":
                _, system, case_key, params, data, direction = message
                fn = None
                gc.collect()
                fn = systems[system].prepare(cases[case_key], params, data, direction)
                reply: tuple[Any, ...] = ("ok", None)
            elif message[0] == "call":
                reply = ("ok", fn())
            elif message[0] == "calibrate":
                reply = ("ok", harness.calibrate(fn, message[1]))
            elif message[0] == "time":
                gc.collect()
                reply = ("ok", harness.time_calls(fn, message[1]))
            else:
                reply = ("error", "ValueError", f"unknown request {message[0]!r}", "")
        except Unavailable as exc:
            reply = ("unavailable", str(exc))
        except Exception as exc:  # noqa: BLE001 - reported as an error reply
            reply = ("error", type(exc).__name__, str(exc), traceback.format_exc())
        _send(replies, reply)


if __name__ == "__main__":
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # anything printed goes to stderr, not the pipe
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, protocol_out)
