"""Which NATS / JetStream failures are the bus's, not the message's or the caller's.

A transient fault (a request that timed out, no responders or no stream
leader during an election or a partition, a full store, a connection being
re-made) is retried in place by whoever met it: the consume loop
(``rlvr.actors.consume``), the topology's owner at start-up (``Bus.ensure_topology``),
the learner's own writes. Anything else is a real error and is raised.
"""

from __future__ import annotations

import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.errors import TimeoutError as NatsTimeoutError


def is_transient_bus_fault(e: BaseException) -> bool:
    """A NATS / JetStream failure that says nothing about the message: a
    publish or pull that timed out, no responders or no stream leader (an
    election, a partition), a full store (503) or a store the disk refused (500),
    a connection being re-made."""
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    if isinstance(e, (NatsTimeoutError, nats_errors.NoRespondersError, nats_errors.ConnectionClosedError,
                      nats_errors.ConnectionReconnectingError, nats_errors.StaleConnectionError,
                      js_errors.NoStreamResponseError, js_errors.ServiceUnavailableError)):
        return True
    if not isinstance(e, js_errors.APIError):
        return False
    return e.code in (503, 504) or (e.code == 500 and _store_failed(e.description or ""))


def _store_failed(description: str) -> bool:
    """The server's own store refused (its disk full, or a stream whose write error it latched until a
    restart): "error creating store for stream/consumer", or the OS error itself. Nothing to do with
    the request; a supervisor restarts the server once it has space (docs/faults.md), so it is retried
    within the caller's bound like any other transient fault."""
    return description.startswith("error creating store for") or "no space left on device" in description
