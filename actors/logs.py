"""structlog set-up shared by every process.

Lines are JSON when stderr is not a TTY (or when asked), readable on a
console otherwise. ``run``, ``role`` and ``replica`` are bound once per
process; ``task_id`` and ``trace_id`` are bound per message through
contextvars (``bind_message``), so every line logged while handling a message
carries them, including lines from library code called inside the handler.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

from rlvr.actors.secrets import redact_log_event

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(
    *,
    run: str,
    role: str,
    replica: str,
    fmt: Literal["auto", "json", "console"] = "auto",
    level: str = "info",
) -> None:
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            # Last before rendering: no credential leaves in any field or traceback.
            redact_log_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Libraries that use stdlib logging (nats, deepspeed, vllm) go to stderr too.
    logging.basicConfig(level=max(_LEVELS[level], logging.WARNING), stream=sys.stderr)
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(run=run, role=role, replica=replica)


class bind_message:  # noqa: N801 (used as a context manager, like contextlib's)
    """Bind ``task_id``/``trace_id``/... for the lines logged inside the block.
    A class, not a generator: it is entered once per message on every hop."""

    __slots__ = ("_fields", "_tokens")

    def __init__(self, **fields: object) -> None:
        self._fields = {k: v for k, v in fields.items() if v is not None}

    def __enter__(self) -> None:
        self._tokens = structlog.contextvars.bind_contextvars(**self._fields)

    def __exit__(self, *exc: object) -> None:
        structlog.contextvars.reset_contextvars(**self._tokens)


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
