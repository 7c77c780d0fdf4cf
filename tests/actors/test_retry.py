"""The one retry policy: ``call_retrying`` is ``retrying`` with a plain first call.

The hot paths (a handler per message, a pull per batch) call it, so what it
must keep is the policy: a transient fault is retried (counted by
``on_retry`` before each wait), anything else is raised at once, and a
deadline ends the retries with the last error."""

import anyio
import pytest
from nats.errors import TimeoutError as NatsTimeoutError

from rlvr.actors.retry import FOREVER, call_retrying


def test_a_first_success_is_one_plain_call():
    calls = []

    async def ok():
        calls.append(1)
        return "done"

    assert anyio.run(lambda: call_retrying("t", ok, until=FOREVER)) == "done"
    assert calls == [1]


def test_transient_faults_are_retried_with_on_retry_before_each_wait():
    calls, retried = [], []

    async def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise NatsTimeoutError()
        return len(calls)

    result = anyio.run(lambda: call_retrying("t", flaky, until=FOREVER, wait_initial=0.001, wait_max=0.002,
                                             on_retry=lambda e: retried.append(type(e).__name__)))
    assert result == 3 and len(calls) == 3
    assert retried == ["TimeoutError", "TimeoutError"]  # the first failure counted like any later one


def test_anything_but_a_transient_fault_is_raised_at_once():
    calls = []

    async def broken():
        calls.append(1)
        raise ValueError("a bug, not the bus")

    with pytest.raises(ValueError, match="a bug"):
        anyio.run(lambda: call_retrying("t", broken, until=FOREVER, wait_initial=0.001))
    assert calls == [1]


def test_a_deadline_ends_the_retries_with_the_last_error():
    calls = []

    async def down():
        calls.append(1)
        raise NatsTimeoutError()

    with pytest.raises(NatsTimeoutError):
        anyio.run(lambda: call_retrying("t", down, until=0.05, wait_initial=0.01, wait_max=0.01))
    assert 2 <= len(calls) < 50


def test_a_store_the_servers_disk_refused_is_transient_and_other_server_errors_are_not():
    """The errors a full disk under nats-server gave the learner in the chaos run (issue 38), verbatim:
    it exited on them; they are the server's, retried within the caller's bound."""
    import nats.js.errors as js_errors

    from rlvr.actors.bus_faults import is_transient_bus_fault

    seen = [js_errors.ServerError(code=500, err_code=10012, description="error creating store for consumer"),
            js_errors.ServerError(code=500, err_code=10012, description=(
                "write /tmp/w/nats-store/jetstream/$G/streams/RLVR_chaos_TASKS/obs/rollout/meta.inf.tmp: "
                "no space left on device"))]
    assert all(is_transient_bus_fault(e) for e in seen)
    assert not is_transient_bus_fault(js_errors.ServerError(code=500, err_code=10999, description="something else"))
    assert not is_transient_bus_fault(js_errors.BadRequestError(code=400, err_code=10058,
                                                                description="stream name already in use"))
