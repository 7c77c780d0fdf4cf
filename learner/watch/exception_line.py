"""The line of a failure's detail that says what failed, kept whole.

A verdict's or an episode's ``detail`` says why it failed in words a
person reads: "compute_score raised RuntimeError: ...", "the agent exited
with status 1; stderr: Traceback ...", "reset() raised ...". What an alarm or
a summary quotes is the one line that names the exception, whole: a cut at
a fixed width (the alarms' 300 characters of a quoted completion) once
showed ``RuntimeError: cra`` (issue 44). Pure.
"""

from __future__ import annotations

import re

LINE_CHARS = 4000  # a line longer than this is cut, and marked: generous, never a quote's 300

# The last line of a Python exception: "Name: message" or a bare "Name", dotted names allowed.
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(: .*)?$")
# An exception's "Type: message" inside a sentence ("the agent raised AttributeError: ...").
_EXC_IN_TEXT = re.compile(r"\b(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Iteration|Expired|Fault)"
                          r"(?::.*|$)")
_TRACEBACK = "Traceback (most recent call last):"


def exception_line(detail: str) -> str:
    """The line that says what failed, whole (up to ``LINE_CHARS``), from a verdict's or an episode's detail:
    the final line of the last traceback in it (a command agent's stderr), else the last "XxxError: message"
    in it, from the exception's name on ("the agent raised AttributeError: ..." gives "AttributeError: ..."),
    else the detail itself on one line. "" for an empty detail."""
    lines = [line.rstrip() for line in detail.strip().splitlines() if line.strip()]
    found = ""
    at = max((i for i, line in enumerate(lines) if _TRACEBACK in line), default=None)
    if at is not None:
        # The exception line is the first unindented line after the frames of the last traceback.
        found = next((line for line in lines[at + 1:] if not line[:1].isspace() and _EXC_LINE.match(line)), "")
    if not found:
        for line in reversed(lines):
            m = _EXC_IN_TEXT.search(line)
            if m:
                found = line[m.start():]
                break
    if not found:
        found = " ".join(line.strip() for line in lines)
    return found if len(found) <= LINE_CHARS else found[: LINE_CHARS - 1] + "…"


__all__ = ["LINE_CHARS", "exception_line"]
