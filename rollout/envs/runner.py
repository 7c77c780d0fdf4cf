"""Each episode's environment runs on an event loop of its own, in a thread of its own.

An environment is user code: an ``async def step`` that loops without
awaiting, or calls a blocking library, would stall the rollout's event loop
and with it every other episode, the heartbeat and the task's keep-alive.
So every call into an environment (its constructor, ``reset``, ``step``, its
tools, ``close``) is submitted to a dedicated thread that runs an asyncio
loop for that one episode, and the rollout waits for it under a deadline.
Past the deadline the call is cancelled; if the thread does not come back
(code that never yields) it is abandoned, its loop marked dead, and the
episode ends ``env_timeout`` while the rollout goes on. A connection an
environment opens (OpenEnv's WebSocket) stays on its own loop for the whole
episode, as async clients expect. What a stuck call had started (a process it
forked, then hung waiting for) is killed when the episode ends (``spawns``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from rlvr.rollout.envs import spawns

T = TypeVar("T")


class EnvTimeoutError(TimeoutError):
    """An environment call outlasted its deadline."""


class EnvThread:
    def __init__(self, name: str) -> None:
        spawns.install()
        self.name = name
        self.since = spawns.now()
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=f"env-{name}", daemon=True)
        self.thread.start()
        self._ready.wait()
        self.dead = False  # a call never came back: nothing more is sent to this loop

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    async def call(self, fn: Callable[[], Awaitable[T] | T], timeout_s: float, what: str) -> T:
        """``fn()`` (a coroutine function or a plain one) on the environment's loop, within ``timeout_s``."""
        if self.dead:
            raise EnvTimeoutError(f"{what}: the environment's thread is stuck in an earlier call")

        async def run() -> Any:
            spawns.own(self)  # processes this call starts are this episode's (spawns.reap)
            value = fn()
            if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
                value = await value
            return value

        future = asyncio.run_coroutine_threadsafe(run(), self.loop)
        try:
            with anyio.fail_after(timeout_s):
                # Awaited on the rollout's loop, no thread of its own blocked waiting.
                return await asyncio.wrap_future(future)
        except TimeoutError:
            future.cancel()
            if not await self._answers(1.0):
                self.dead = True
            raise EnvTimeoutError(f"{what} did not return within {timeout_s:g}s") from None

    async def _answers(self, within_s: float) -> bool:
        """Whether the loop still runs callbacks (the timed-out call yielded when cancelled)."""
        ping = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self.loop)
        with anyio.move_on_after(within_s):
            await asyncio.wrap_future(ping)
            return True
        return False

    def stop(self) -> None:
        """End the loop; a stuck thread is left behind (it is a daemon), what it started is killed."""
        if self.dead:
            spawns.reap(self, self.since, self.name)
        else:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=1.0)
            if not self.thread.is_alive():
                self.loop.close()


__all__ = ["EnvThread", "EnvTimeoutError"]
