"""What really failed, in one line, for logs, dead letters and verdicts."""

from __future__ import annotations


def error_text(e: BaseException) -> str:
    """``Type: message`` of what really failed: a task group's ``ExceptionGroup`` ("unhandled
    errors in a TaskGroup (4 sub-exceptions)") is replaced by its distinct causes, with counts."""
    if not isinstance(e, BaseExceptionGroup):
        return f"{type(e).__name__}: {e}"
    causes: dict[str, int] = {}
    stack: list[BaseException] = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, BaseExceptionGroup):
            stack.extend(x.exceptions)
        else:
            text = f"{type(x).__name__}: {x}"[:500]
            causes[text] = causes.get(text, 0) + 1
    return "; ".join(f"{t}" + (f" (x{n})" if n > 1 else "") for t, n in causes.items())


__all__ = ["error_text"]
