"""Run one program in a sandbox, in a process of its own, from an async caller.

``await run_isolated(cfg, files, argv, stdin, limits)`` starts ``python -P -m
rlvr.sandbox.runner`` in a new session, hands it the request over stdin, and
reads its ``ExecutionResult`` from stdout. The child builds the sandbox
``cfg`` names (``levels.sandbox_from_config``: bwrap, docker, or ``none`` only
when allowed), runs the program under ``limits``, and exits; it dies with its
parent (``die_with_parent``). The caller's process never runs the program and
never becomes a subreaper, so an async role (the rollout's Python tool) can
use the sandbox at the verifier's levels and limits.

A run that outlasts ``limits.wall_s`` plus ``grace_s`` (a sandbox that cannot
even start, a hung child) has its whole process group killed: the result then
says ``timed_out`` (or ``error`` for a child that died or answered garbage).
Nothing here raises for what the program did; a result is always returned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import msgspec

from rlvr.sandbox.base import ExecutionResult, SandboxLimits
from rlvr.sandbox.config import SandboxConfig


class RunRequest(msgspec.Struct, frozen=True):
    cfg: SandboxConfig
    files: dict[str, str]
    argv: list[str]
    stdin: str
    limits: SandboxLimits


async def run_isolated(
    cfg: SandboxConfig, files: dict[str, str], argv: list[str], stdin: str, limits: SandboxLimits,
    *, grace_s: float = 30.0,
) -> ExecutionResult:
    """The program's result; never raises for what the program (or the sandbox) did."""
    import anyio

    request = msgspec.msgpack.encode(RunRequest(cfg, files, argv, stdin, limits))
    started = time.monotonic()
    proc = await anyio.open_process(
        [sys.executable, "-P", "-m", "rlvr.sandbox.runner"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        with anyio.move_on_after(limits.wall_s + grace_s) as scope:
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send(request)
            await proc.stdin.aclose()
            chunks = [chunk async for chunk in proc.stdout]
            await proc.wait()
        if scope.cancelled_caught:
            return _failed(started, f"the sandbox runner did not finish within {limits.wall_s + grace_s:g}s",
                           timed_out=True)
        try:
            return msgspec.msgpack.decode(b"".join(chunks), type=ExecutionResult)
        except msgspec.DecodeError:
            err = b""
            if proc.stderr is not None:
                with anyio.move_on_after(1):
                    err = b"".join([c async for c in proc.stderr])
            return _failed(started, f"the sandbox runner exited {proc.returncode}: {err.decode(errors='replace')[-500:]}")
    finally:
        with anyio.CancelScope(shield=True):
            if proc.returncode is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                await proc.wait()


def _failed(started: float, why: str, *, timed_out: bool = False) -> ExecutionResult:
    return ExecutionResult(None, "", "", timed_out=timed_out, memory_exceeded=False, output_truncated=False,
                           wall_s=time.monotonic() - started, error=why)


def main() -> int:
    from rlvr.sandbox.levels import sandbox_from_config
    from rlvr.sandbox.reaper import die_with_parent

    die_with_parent(signal.SIGKILL)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_RDWR), 1)  # a stray print cannot corrupt the answer
    req = msgspec.msgpack.decode(sys.stdin.buffer.read(), type=RunRequest)
    try:
        box = sandbox_from_config(req.cfg)
    except Exception as e:  # noqa: BLE001 - no sandbox here: that is the answer
        result = ExecutionResult(None, "", "", False, False, False, 0.0, error=f"{type(e).__name__}: {e}")
    else:
        try:
            result = box.run(req.files, req.argv, req.stdin, req.limits)
        finally:
            box.close()
    out.write(msgspec.msgpack.encode(result))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["RunRequest", "run_isolated"]
