"""A pool of killable worker processes that run verifications under a hard timeout.

``VerifierPool.verify`` resolves the spec in the caller (a bad spec raises
``VerifierSpecError`` before anything is dispatched), then hands the work to
an idle worker process and waits at most ``timeout_s`` of wall-clock time:
- past the deadline the worker's whole process group is SIGKILLed and a
  fresh worker replaces it; the result is ``Verdict(outcome="timeout",
  reward=timeout_reward)``;
- a worker that dies (segfault, ``os._exit``) gives ``outcome="sandbox_error"``;
  a verifier that raises (``MemoryError``, a bug, a user's reward function
  that fails) gives ``outcome="error"`` with the exception in ``detail``; a
  dead or MemoryError-struck worker is replaced.
Neither is ever reported as ``wrong``. At most ``size`` verifications run at
once, and the pool returns to full size after every kill.

Calls are batched: ``verify`` queues its call, and a dispatcher hands every
call waiting (split evenly over the idle workers, at most ``max_batch``) to
an idle worker as one framed request (``rlvr.verify.pool_worker``). The
worker answers each call on its own, and each call gets its own
``timeout_s``, counted from the previous call's answer. On a timeout or a
death only that call gets the verdict; the worker is killed and the calls
after it in the batch, which never ran, go back to the front of the queue.
One request per batch instead of one per sample is most of the IPC cost of
a cheap verifier (bench/bus_hop.py).

Why not ``anyio.to_process``: its workers are shared by everything in the
event loop, spawned lazily, pruned when idle and capped by one global
limiter, so neither the pool size nor a warm (sympy already imported) worker
could be guaranteed. Here each worker is started with ``anyio.open_process``
in its own session, talking length-prefixed msgpack over its stdin/stdout
pipes (``rlvr.verify.pool_worker``).

The exception: built-ins that provably finish in time linear in the
completion (``exact``, ``random``, a ``regex`` whose pattern is linear, a
``composite`` of these: ``rlvr.verify.inline``) run in the caller's process,
since a round trip to a worker costs more than they do.

Not covered here: which verifier does what (``rlvr.verify.registry``), NATS
(the verifier actor), sandboxing untrusted code (``rlvr.sandbox``).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

import anyio
import msgspec
from anyio.abc import Process, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

from rlvr.actors.meters import quantile
from rlvr.actors.retry import FOREVER, retrying
from rlvr.protocol.samples import OUTCOMES, Verdict
from rlvr.protocol.tasks import VerifierSpec
from rlvr.verify.config import VerifyConfig
from rlvr.verify.pool_worker import (
    WORKER_COMMAND,
    WorkerCall,
    WorkerInit,
    WorkerReply,
    batch_payload,
    encoder,
    frame,
    reply_decoder,
)
from rlvr.verify.inline import runs_inline
from rlvr.verify.registry import BoundVerifier, VerifyContext, get, load_plugins, resolve
from rlvr.verify.registry import plugins as loaded_plugins


class WorkerStartError(RuntimeError):
    """A worker process could not be started or did not become ready in time."""


class _Worker:
    def __init__(self, process: Process) -> None:
        self.process = process
        self.stdin = process.stdin
        self.stdout = BufferedByteReceiveStream(process.stdout)
        self.calls = 0

    async def send(self, payload: bytes) -> None:
        await self.stdin.send(frame(payload))

    async def receive(self) -> bytes:
        head = await self.stdout.receive_exactly(4)
        return await self.stdout.receive_exactly(int.from_bytes(head, "big"))

    async def request(self, payload: bytes) -> bytes:
        await self.send(payload)
        return await self.receive()

    def kill(self) -> None:
        # The worker leads its own session: kill everything it started too.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop the worker: EOF first (it exits, running its atexit clean-up,
        e.g. a sandbox's temporary directory) if ``grace_s``; then SIGKILL."""
        with anyio.CancelScope(shield=True):
            if grace_s > 0:
                with anyio.move_on_after(grace_s):
                    await self.stdin.aclose()
                    await self.process.wait()
            self.kill()
            await self.process.aclose()

    async def death_cause(self) -> str:
        with anyio.move_on_after(2, shield=True):
            code = await self.process.wait()
            if code < 0:
                return f"worker killed by {signal.Signals(-code).name}"
            return f"worker exited with code {code}"
        return "worker stopped answering"


class _Pending:
    """One queued verification and, once answered, its verdict."""

    __slots__ = ("abandoned", "done", "error", "name", "payload", "running", "verdict")

    def __init__(self, name: str, payload: bytes) -> None:
        self.name = name
        self.payload = payload  # an encoded WorkerCall
        self.done = anyio.Event()
        self.verdict: Verdict | None = None
        self.error: BaseException | None = None
        self.abandoned = False
        # While a worker runs it: the wait for its answer, and that worker.
        self.running: tuple[anyio.CancelScope, _Worker] | None = None

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


_IO_ERRORS = (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


class VerifierPool:
    """``size`` worker processes running verifications under a hard timeout.

    Use as ``async with VerifierPool(2, timeout_s=30) as pool: v = await
    pool.verify(spec, text, ctx)``. Entering starts every worker and waits
    until each is warm (``warm`` names verifiers whose warm-up runs in each
    worker, e.g. ``("math",)`` imports sympy); leaving kills them all.
    """

    def __init__(
        self,
        size: int,
        timeout_s: float,
        timeout_reward: float = 0.0,
        *,
        error_reward: float = 0.0,
        warm: tuple[str, ...] = ("math",),
        preload: tuple[str, ...] = (),
        plugins: tuple[str, ...] = (),
        start_timeout_s: float = 120.0,
        max_tasks_per_worker: int = 0,
        latency_window: int = 4096,
        max_batch: int = 32,
    ) -> None:
        if size < 1 or timeout_s <= 0:
            raise ValueError("VerifierPool needs size >= 1 and timeout_s > 0")
        self.size = size
        self.timeout_s = timeout_s
        self.timeout_reward = timeout_reward
        self.error_reward = error_reward
        # Plug-ins given here, and those this process loaded already (the verifier actor's).
        self._plugins = tuple(sorted({*plugins, *loaded_plugins()}))
        self._init = encoder.encode(
            WorkerInit(sys_path=list(sys.path), warm=list(warm), preload=list(preload), plugins=list(self._plugins))
        )
        self._warm = tuple(warm)
        self._start_timeout_s = start_timeout_s
        self._max_tasks = max_tasks_per_worker
        self._latencies: deque[float] = deque(maxlen=latency_window)
        self._outcomes: Counter[str] = Counter()
        self._alive: set[_Worker] = set()
        self._busy = 0
        self._restarts = 0
        self._full = anyio.Event()
        self._tg: TaskGroup | None = None  # background chores: closing and replacing workers
        self._stack = AsyncExitStack()  # holds the task group between __aenter__ and __aexit__
        self._idle_send, self._idle_recv = anyio.create_memory_object_stream[_Worker](size)
        self._max_batch = max(1, max_batch)
        self._queue: deque[_Pending] = deque()  # calls waiting for a worker, oldest first
        self._queued = anyio.Event()  # set when a call is queued; wakes the dispatcher
        self._closed = False
        self._last_spec: tuple[VerifierSpec, BoundVerifier, bool] | None = None  # verify_now's last resolve
        self._batches = 0  # requests sent to workers (each holds one or more calls)

    @classmethod
    def from_config(cls, cfg: VerifyConfig) -> VerifierPool:
        return cls(
            cfg.pool_size,
            cfg.timeout_s,
            cfg.timeout_reward,
            error_reward=cfg.error_reward,
            warm=cfg.warm_verifiers,
            plugins=cfg.plugins,
            start_timeout_s=cfg.worker_start_timeout_s,
            max_tasks_per_worker=cfg.max_tasks_per_worker,
        )

    # -- lifecycle

    async def __aenter__(self) -> VerifierPool:
        # ``verify`` resolves specs in this process, which imports the
        # verifier's module (sympy for math): do that once now, in a thread,
        # rather than in the event loop on the first message.
        await anyio.to_thread.run_sync(load_plugins, self._plugins)  # a bad plug-in raises here
        await anyio.to_thread.run_sync(_load_quietly, self._warm)
        self._stack = AsyncExitStack()
        self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        try:
            async with anyio.create_task_group() as tg:
                for _ in range(self.size):
                    tg.start_soon(self._add_worker)
        except BaseException as e:
            await self.__aexit__(None, None, None)
            if isinstance(e, BaseExceptionGroup) and e.subgroup(WorkerStartError) is not None:
                raise _first_leaf(e) from None
            raise
        self._tg.start_soon(self._dispatch)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._tg is not None
        # Only background chores (closing, replacing workers) run in the task
        # group; cancel them. The body's own exception propagates unwrapped.
        self._tg.cancel_scope.cancel()
        try:
            await self._stack.aclose()
        finally:
            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as tg:
                    for worker in self._alive:
                        tg.start_soon(worker.close, 2.0)
                self._alive.clear()
            # A verify() after exit, or still queued, fails (ClosedResourceError)
            # instead of waiting forever.
            self._closed = True
            self._idle_send.close()
            self._idle_recv.close()
            while self._queue:
                self._queue.popleft().fail(anyio.ClosedResourceError("the verifier pool is closed"))

    async def _spawn(self) -> _Worker:
        env = worker_env(os.environ)
        try:
            process = await anyio.open_process(
                # -P: no working directory on sys.path, so no file lying there shadows rlvr.
                [sys.executable, "-P", "-c", WORKER_COMMAND],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,
                env=env,
                start_new_session=True,
            )
        except OSError as e:  # fork/exec failed (EAGAIN, ENOMEM...)
            raise WorkerStartError(f"cannot start a worker process: {e}") from e
        worker = _Worker(process)
        try:
            with anyio.fail_after(self._start_timeout_s):
                ready = await worker.request(self._init)
            if ready != b"READY":
                raise WorkerStartError(f"worker answered {ready[:40]!r} instead of READY")
        except TimeoutError:
            await worker.close()
            raise WorkerStartError(f"worker not ready within {self._start_timeout_s}s") from None
        except _IO_ERRORS as e:
            cause = await worker.death_cause()
            await worker.close()
            raise WorkerStartError(f"worker failed to start: {cause}") from e
        except BaseException:
            await worker.close()
            raise
        return worker

    async def _add_worker(self) -> None:
        worker = await self._spawn()
        self._alive.add(worker)
        if len(self._alive) == self.size:
            self._full.set()
        self._idle_send.send_nowait(worker)

    async def _replace_forever(self) -> None:
        """Start a replacement worker, retrying with back-off until one starts."""
        async for attempt in retrying("start_verifier_worker", until=FOREVER, on=_worker_did_not_start,
                                      wait_initial=0.5, wait_max=30.0):
            with attempt:
                await self._add_worker()

    def _discard(self, worker: _Worker) -> None:
        """Kill ``worker`` now; close it and start its replacement in the background.
        Once per worker: a worker already discarded (or the pool closed) is left alone."""
        if worker not in self._alive:
            return
        worker.kill()
        self._alive.discard(worker)
        if self._full.is_set():
            self._full = anyio.Event()
        self._restarts += 1
        assert self._tg is not None
        try:
            self._tg.start_soon(worker.close)
            self._tg.start_soon(self._replace_forever)
        except RuntimeError:  # the pool is closing: nothing to replace; the kill stands
            pass

    async def wait_full(self) -> None:
        """Return once every one of the ``size`` workers is alive and ready."""
        while len(self._alive) < self.size:
            await self._full.wait()

    # -- verification

    async def verify(self, spec: VerifierSpec, completion: str, ctx: VerifyContext | None = None) -> Verdict:
        """Verify ``completion`` against ``spec`` in a worker process.

        Raises ``VerifierSpecError`` (before dispatch) for an unknown verifier
        or bad params. Timeouts and crashes come back as verdicts.
        """
        if (verdict := self.verify_now(spec, completion, ctx)) is not None:
            return verdict
        if self._closed:
            raise anyio.ClosedResourceError("the verifier pool is closed")
        ctx = msgspec.structs.replace(ctx or VerifyContext(), budget_s=self.timeout_s)
        call = _Pending(spec.name, encoder.encode(WorkerCall(spec.name, dict(spec.params), completion, ctx)))
        self._queue.append(call)
        self._queued.set()
        try:
            await call.done.wait()
        except BaseException:
            # Cancelled: the dispatcher skips the call; if a worker is on it
            # now, that worker is stopped and replaced (it would go on for up
            # to timeout_s on work nobody wants).
            call.abandoned = True
            if call.running is not None:
                call.running[0].cancel()
                self._discard(call.running[1])  # now: the caller may count on it being gone
            raise
        if call.error is not None:
            raise call.error
        assert call.verdict is not None
        return call.verdict

    def verify_now(self, spec: VerifierSpec, completion: str, ctx: VerifyContext | None = None) -> Verdict | None:
        """The verdict of a verifier that runs inline (``rlvr.verify.inline``), computed
        here and now; None for any other (``verify`` sends it to a worker). Raises
        ``VerifierSpecError`` for an unknown verifier or bad params."""
        if self._last_spec is not None and spec == self._last_spec[0]:  # a group's samples share their spec
            bound, inline = self._last_spec[1], self._last_spec[2]
        else:
            bound = resolve(spec)
            inline = runs_inline(bound)
            self._last_spec = (spec, bound, inline)
        if not inline:
            return None
        if self._closed:
            raise anyio.ClosedResourceError("the verifier pool is closed")
        return self._inline(bound, completion, msgspec.structs.replace(ctx or VerifyContext(), budget_s=self.timeout_s))

    async def _dispatch(self) -> None:
        """Hand the queued calls to idle workers, one batch per worker."""
        while True:
            while not self._queue:
                self._queued = anyio.Event()
                await self._queued.wait()
            worker = await self._idle_recv.receive()
            # Spread what is waiting over the idle workers (this one included).
            idle = 1 + self._idle_recv.statistics().current_buffer_used
            share = min(self._max_batch, max(1, math.ceil(len(self._queue) / idle)))
            batch: list[_Pending] = []
            while self._queue and len(batch) < share:
                call = self._queue.popleft()
                if not call.abandoned:
                    batch.append(call)
            if batch:
                self._busy += 1
                self._batches += 1
                assert self._tg is not None
                self._tg.start_soon(self._run_batch, worker, batch)
            else:
                self._idle_send.send_nowait(worker)

    async def _run_batch(self, worker: _Worker, batch: list[_Pending]) -> None:
        keep = False
        done = 0
        try:
            await worker.send(batch_payload([c.payload for c in batch]))
            keep = True
            for call in batch:
                started = anyio.current_time()
                with anyio.move_on_after(self.timeout_s) as scope:
                    call.running = (scope, worker)
                    try:
                        raw = await worker.receive()
                    except _IO_ERRORS:
                        raw = None
                call.running = None
                elapsed = anyio.current_time() - started
                done += 1
                if call.abandoned and scope.cancelled_caught:
                    keep = False  # its caller gave up mid-call (see verify)
                    break
                if scope.cancelled_caught:
                    keep = False
                    self._finish(call, Verdict(
                        reward=self.timeout_reward,
                        outcome="timeout",
                        verifier=call.name,
                        latency_s=elapsed,
                        detail=f"no verdict within {self.timeout_s}s; worker killed",
                    ), elapsed)
                    break
                if raw is None:
                    keep = False
                    self._finish(call, self._error(call.name, elapsed, await worker.death_cause()), elapsed)
                    break
                try:
                    reply = reply_decoder.decode(raw)
                except msgspec.ValidationError as e:  # e.g. an outcome outside the Literal
                    reply = WorkerReply(error=f"an invalid Verdict: {e}")
                worker.calls += 1
                if reply.verdict is None:
                    verdict = self._error(call.name, elapsed, f"verifier raised {reply.error}", outcome="error")
                else:
                    verdict = msgspec.structs.replace(reply.verdict, verifier=call.name, latency_s=elapsed)
                self._finish(call, verdict, elapsed)
                if reply.recycle or (self._max_tasks and worker.calls >= self._max_tasks):
                    keep = False
                    break
        except _IO_ERRORS:  # the send failed: the worker is gone; nothing of the batch ran
            keep = False
        finally:
            # Calls the worker never answered go back to the front, in order.
            self._queue.extendleft(reversed(batch[done:]))
            if done < len(batch):
                self._queued.set()
            # A worker that did not answer every call cleanly (also our own
            # cancellation mid-batch) is in an unknown state: replace it.
            self._busy -= 1
            if keep:
                self._idle_send.send_nowait(worker)
            else:
                self._discard(worker)

    def _inline(self, bound: BoundVerifier, completion: str, ctx: VerifyContext) -> Verdict:
        """Run an inline verifier here; an exception is outcome ``error``, as from a worker."""
        started = time.perf_counter()
        try:
            verdict = bound(completion, ctx)
        except Exception as e:  # a bug: the same verdict a worker would send back
            verdict = self._error(bound.name, 0.0, f"verifier raised {type(e).__name__}: {e}", outcome="error")
        elapsed = time.perf_counter() - started
        verdict = msgspec.structs.replace(verdict, latency_s=elapsed)
        self._outcomes[verdict.outcome] += 1
        self._latencies.append(elapsed)
        return verdict

    def _finish(self, call: _Pending, verdict: Verdict, elapsed: float) -> None:
        call.verdict = verdict
        call.done.set()
        self._outcomes[verdict.outcome] += 1
        self._latencies.append(elapsed)

    def _error(self, name: str, elapsed: float, detail: str, outcome: str = "sandbox_error") -> Verdict:
        return Verdict(reward=self.error_reward, outcome=outcome, verifier=name, latency_s=elapsed, detail=detail)

    # -- metrics

    def stats(self) -> dict[str, float]:
        """Counters and gauges for the heartbeat (all floats)."""
        lat = sorted(self._latencies)
        out: dict[str, float] = {
            "pool_size": float(self.size),
            "workers_alive": float(len(self._alive)),
            "workers_busy": float(self._busy),
            "waiting": float(sum(not c.abandoned for c in self._queue)),
            "worker_restarts": float(self._restarts),
            "batches": float(self._batches),
            "verified": float(sum(self._outcomes.values())),
            "latency_p50_s": quantile(lat, 0.50),
            "latency_p99_s": quantile(lat, 0.99),
        }
        for outcome in OUTCOMES:
            out[f"outcome_{outcome}"] = float(self._outcomes[outcome])
        return out


# What a worker inherits of the actor's environment: an allow-list, so that
# no secret (NATS credentials, cloud keys, tokens) is in a process that runs
# untrusted code's sandbox, nor readable in its /proc/<pid>/environ.
_WORKER_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "OPENBLAS_NUM_THREADS", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
               "PYTHONIOENCODING", "PYTHONFAULTHANDLER", "VIRTUAL_ENV", "DOCKER_HOST", "DOCKER_TLS_VERIFY",
               "DOCKER_CERT_PATH", "COVERAGE_PROCESS_START")


def worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a worker starts with: the allow-listed variables only."""
    env = {k: v for k, v in environ.items() if k in _WORKER_ENV or k.startswith("LC_")}
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _load_quietly(names: tuple[str, ...]) -> None:
    for name in names:
        try:
            get(name)
        except Exception:  # noqa: BLE001 - the workers report warm-up problems
            pass


def _worker_did_not_start(e: BaseException) -> bool:
    return isinstance(e, WorkerStartError)


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


__all__ = ["VerifierPool", "WorkerStartError", "worker_env"]
