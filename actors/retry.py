"""One way to retry: transient faults, with the deadline or ``FOREVER`` written at the call.

    async for attempt in retrying("publish_weights", until=bus.cfg.topology_wait_s):
        with attempt:
            await publish(...)

Every retry loop of the project is this one (tenacity underneath): exponential
backoff with jitter between ``wait_initial`` and ``wait_max`` seconds, one
warning per retry naming ``what`` and the error, an optional ``on_retry``
callback (a counter, a keep-alive) before each wait. ``until`` has no
default, so each call says how long it may take: seconds (the last error is
raised once the next wait would pass them) or ``FOREVER`` (a shutdown's
cancellation is the only way out; the loop says so in its log and counters).

On a hot path (a handler per message, a pull per batch) use ``call_retrying``:
the same policy, but the first attempt is a plain call, and tenacity's
machinery (tens of microseconds) is built only once an attempt has failed.

Only what ``on`` accepts is retried: by default ``is_transient_bus_fault`` (a
request that timed out, no responders or no leader, a full store, a
connection being re-made). Any other exception is raised at once: a bug or a
bad input is never retried into a hang.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_before_delay,
    stop_never,
    wait_exponential_jitter,
)

from rlvr.actors.bus_faults import is_transient_bus_fault
from rlvr.actors.logs import get_logger

FOREVER: None = None
T = TypeVar("T")
log = get_logger("rlvr.retry")


def retrying(
    what: str,
    *,
    until: float | None,
    on: Callable[[BaseException], bool] = is_transient_bus_fault,
    wait_initial: float = 0.25,
    wait_max: float = 10.0,
    on_retry: Callable[[BaseException], Awaitable[None] | None] | None = None,
    **log_fields: object,
) -> AsyncRetrying:
    """An ``async for`` of attempts at ``what``: retried while ``on(error)``, for
    at most ``until`` seconds (``FOREVER``: no limit); the last error is raised."""

    async def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        assert error is not None  # tenacity sleeps only after a failed attempt
        log.warning("retry", op=what, error=f"{type(error).__name__}: {error}", attempt=state.attempt_number,
                    retry_in_s=round(state.upcoming_sleep, 2), **log_fields)
        if on_retry is not None:
            pending = on_retry(error)
            if pending is not None:
                await pending

    return AsyncRetrying(
        retry=retry_if_exception(on),
        stop=stop_never if until is None else stop_before_delay(until),
        wait=wait_exponential_jitter(initial=wait_initial, max=wait_max, jitter=wait_initial),
        sleep=anyio.sleep,
        before_sleep=before_sleep,
        reraise=True,
    )


async def call_retrying(
    what: str,
    fn: Callable[[], Awaitable[T]],
    *,
    until: float | None,
    on: Callable[[BaseException], bool] = is_transient_bus_fault,
    **kwargs: object,
) -> T:
    """``await fn()``, retried as ``retrying(what, until=..., on=..., **kwargs)``
    would. The first attempt is a plain call; a failure that ``on`` accepts is
    handed to the retry loop as its first attempt's outcome (logged, counted by
    ``on_retry``, waited on), so the policy is the same, only cheaper when
    nothing fails."""
    try:
        return await fn()
    except BaseException as e:
        if not on(e):
            raise
        first: BaseException | None = e
    async for attempt in retrying(what, until=until, on=on, **kwargs):  # type: ignore[arg-type]
        with attempt:
            if first is not None:
                error, first = first, None
                raise error
            return await fn()
    raise AssertionError("unreachable: retrying either returns or raises")


__all__ = ["FOREVER", "call_retrying", "retrying"]
