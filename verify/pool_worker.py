"""The worker side of the verifier pool, and the wire both sides speak.

A worker is ``python -P -c "...worker_main()"`` in its own session. It talks
length-prefixed msgpack frames over its stdin/stdout pipes (fd 0/1 are then
re-pointed at /dev/null, so a stray print cannot corrupt the channel):

1. the pool sends ``WorkerInit``; the worker imports, warms up and answers ``READY``;
2. then, until EOF, the pool sends a *batch*: one frame holding a list of
   ``WorkerCall``. The worker runs them in order and answers each with its own
   ``WorkerReply`` frame as soon as it is done. One frame per batch saves a write
   and a wake-up per sample; one reply per call lets the pool time every
   call on its own (its clock starts when the previous reply arrives), so
   the hard per-sample timeout holds inside a batch.

Not here: timeouts, kills and replacement (``rlvr.verify.pool``), which
verifier does what (``rlvr.verify.registry``).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import msgspec

from rlvr.sandbox.reaper import die_with_parent
from rlvr.protocol.samples import Verdict
from rlvr.protocol.tasks import VerifierSpec
from rlvr.verify.registry import VerifierPluginError, VerifyContext, load_plugins, resolve, warm_up


class WorkerInit(msgspec.Struct, array_like=True):
    sys_path: list[str]
    warm: list[str]
    preload: list[str]
    # [verify] plugins: loaded in each worker as in the parent, never named by a message.
    plugins: list[str] = []


class WorkerCall(msgspec.Struct, array_like=True):
    name: str
    params: dict[str, Any]
    completion: str
    ctx: VerifyContext


class WorkerReply(msgspec.Struct, array_like=True, omit_defaults=True):
    verdict: Verdict | None = None
    error: str = ""  # "Type: message" of an exception raised by the verifier
    recycle: bool = False  # the worker should be replaced (MemoryError)


encoder = msgspec.msgpack.Encoder()
reply_decoder = msgspec.msgpack.Decoder(WorkerReply)


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def batch_payload(calls: list[bytes]) -> bytes:
    """One request frame's payload: a msgpack list of already-encoded ``WorkerCall``s."""
    return encoder.encode([msgspec.Raw(c) for c in calls])


def _read_exactly(f, n: int) -> bytes | None:
    data = f.read(n)
    return data if len(data) == n else None


def _run(call: WorkerCall) -> WorkerReply:
    try:
        bound = resolve(VerifierSpec(name=call.name, params=call.params))
        return WorkerReply(verdict=bound(call.completion, call.ctx))
    except MemoryError:
        return WorkerReply(error="MemoryError: out of memory", recycle=True)
    except Exception as e:  # noqa: BLE001 - a verifier fault is a sandbox_error verdict
        return WorkerReply(error=f"{type(e).__name__}: {e}"[:2000])


def worker_main() -> None:
    """Entry point of a worker process (``python -c``); serves batches until EOF."""
    die_with_parent(signal.SIGKILL)
    rfile = open(os.dup(0), "rb")
    wfile = open(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)

    def send(payload: bytes) -> None:
        wfile.write(frame(payload))
        wfile.flush()

    def receive() -> bytes | None:
        head = _read_exactly(rfile, 4)
        return None if head is None else _read_exactly(rfile, int.from_bytes(head, "big"))

    raw = receive()
    if raw is None:
        return
    init = msgspec.msgpack.decode(raw, type=WorkerInit)
    sys.path[:] = init.sys_path
    problems = []
    for module in init.preload:
        try:
            __import__(module)
        except Exception as e:  # noqa: BLE001 - reported, the worker still serves
            problems.append(f"preload of {module!r} failed: {type(e).__name__}: {e}")
    for plugin in init.plugins:  # one by one: a plug-in that fails here must not hide the others
        try:
            load_plugins([plugin])
        except VerifierPluginError as e:  # the parent loaded them already; reported, not fatal
            problems.append(str(e))
    problems += warm_up(init.warm)
    for problem in problems:
        print(f"rlvr verifier worker {os.getpid()}: {problem}", file=sys.stderr, flush=True)
    send(b"READY")

    decoder = msgspec.msgpack.Decoder(list[WorkerCall])
    while (raw := receive()) is not None:
        for call in decoder.decode(raw):
            send(encoder.encode(_run(call)))


WORKER_COMMAND = "from rlvr.verify.pool_worker import worker_main; worker_main()"
