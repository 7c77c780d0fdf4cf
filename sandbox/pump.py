"""Feed a sandboxed child's stdin and collect its capped stdout/stderr, in
this thread, with one ``selectors`` loop (no reader threads), until it exits,
its deadline passes, or an output cap is hit. Used by the local sandbox.

At the deadline or a cap the child's process group is SIGKILLed (for bwrap
that is its monitor process; the pid namespace takes the rest). After the
child exits the pipes are drained for at most ``GRACE_S``: a descendant that
outlived it and still holds them cannot keep the run open.

Not covered: what the child is, or killing descendants outside its group
(the sandbox levels do that).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

GRACE_S = 1.0  # how long to drain pipes after the program is gone


def pump(proc: subprocess.Popen, data: bytes, output_bytes: int, deadline: float) -> tuple[bytes, bytes, bool, bool]:
    """Returns (stdout, stderr, timed_out, truncated), each stream capped at
    ``output_bytes``."""
    assert proc.stdin and proc.stdout and proc.stderr
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ)
    stdin_fd, off = proc.stdin.fileno(), 0
    if data:
        os.set_blocking(stdin_fd, False)
        sel.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    timed_out = truncated = killed = False
    while len(sel.get_map()) > 1 or (pidfd in sel.get_map() and not killed):
        left = deadline - time.monotonic()
        if left <= 0:
            if killed:
                break  # something outside our group holds the pipes: stop waiting
            timed_out = not truncated
            killpg(proc)
            killed, deadline = True, time.monotonic() + GRACE_S
            continue
        for key, _ in sel.select(left):
            fd = key.fd
            if fd == pidfd:  # the program exited: end its group, then drain
                sel.unregister(pidfd)
                killpg(proc)
                killed, deadline = True, min(deadline, time.monotonic() + GRACE_S)
            elif fd == stdin_fd:
                try:
                    off += os.write(fd, data[off : off + 65536])
                except (BrokenPipeError, BlockingIOError):
                    off = len(data)
                if off >= len(data):
                    sel.unregister(fd)
                    proc.stdin.close()
            else:
                chunk = os.read(fd, 65536)
                if not chunk:
                    sel.unregister(fd)
                    continue
                buf = bufs[fd]
                room = output_bytes - len(buf)
                buf += chunk[: max(room, 0)]
                if len(chunk) > room and not truncated:
                    truncated = True
                    killpg(proc)
                    killed, deadline = True, min(deadline, time.monotonic() + GRACE_S)
    sel.close()
    os.close(pidfd)
    if not proc.stdin.closed:
        proc.stdin.close()
    if not killed:
        killpg(proc)
    return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), timed_out, truncated


def killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


__all__ = ["GRACE_S", "killpg", "pump"]
