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
    election, a partition), a full store (503), a connection being re-made."""
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    if isinstance(e, (NatsTimeoutError, nats_errors.NoRespondersError, nats_errors.ConnectionClosedError,
                      nats_errors.ConnectionReconnectingError, nats_errors.StaleConnectionError,
                      js_errors.NoStreamResponseError, js_errors.ServiceUnavailableError)):
        return True
    return isinstance(e, js_errors.APIError) and e.code in (503, 504)
