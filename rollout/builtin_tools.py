"""The built-in tools: a calculator and a Python executor that runs in the sandbox.

- ``calculator``: arithmetic on numbers (``+ - * / // % **``, parentheses,
  unary minus), evaluated from the expression's syntax tree, never by
  ``eval``; huge powers and deep nesting are refused.
- ``python``: model-written code, run by ``rlvr.sandbox.runner`` in a process
  of its own, in the sandbox ``[rollout.sandbox]`` names (the same levels and
  limits as the code verifier's ``[verify.sandbox]``), never in the rollout's
  process. The tool's answer is the program's stdout (and stderr, and how it
  ended when it did not end well).

``builtin_tools()`` gives them by name; an environment offers the ones its
params list (the ``tools`` environment: ``tools = ["calculator"]``). The
rollout sets the python tool's sandbox from ``[rollout.sandbox]`` at start
(``use_sandbox``).
"""

from __future__ import annotations

from rlvr.rollout.tools import Tool, tool
from rlvr.sandbox.arith import CalculatorInputError, evaluate
from rlvr.sandbox.config import SandboxConfig

@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression (numbers, + - * / // % ** and parentheses) and return its value."""
    value = evaluate(expression)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def python_tool(cfg: SandboxConfig) -> Tool:
    """The ``python`` tool, running code in the sandbox ``cfg`` names."""
    from rlvr.sandbox.base import SandboxLimits
    from rlvr.sandbox.runner import run_isolated

    import msgspec

    limits = msgspec.convert(msgspec.to_builtins(cfg.limits), SandboxLimits)

    async def python(code: str) -> str:
        """Run a Python program in a sandbox (no network, limited time and memory) and return what it printed."""
        r = await run_isolated(cfg, {"main.py": code}, ["python", "main.py"], "", limits)
        if r.error:
            raise RuntimeError(f"the sandbox failed: {r.error}")
        out = r.stdout + (f"\n[stderr]\n{r.stderr}" if r.stderr.strip() else "")
        for flag, said in ((r.timed_out, "timed out"), (r.memory_exceeded, "ran out of memory"),
                           (r.output_truncated, "output truncated")):
            if flag:
                out += f"\n[{said}]"
        if r.exit_code not in (0, None):
            out += f"\n[exit code {r.exit_code}]"
        return out.strip() or "(no output)"

    return tool(python, timeout_s=limits.wall_s + 30.0)


_sandbox = SandboxConfig()


def use_sandbox(cfg: SandboxConfig) -> None:
    """The sandbox the built-in python tool runs in (the rollout sets it from [rollout.sandbox] at start)."""
    global _sandbox
    _sandbox = cfg


def builtin_tools(sandbox: SandboxConfig | None = None) -> dict[str, Tool]:
    """The built-in tools by name; python in ``sandbox`` (default: the rollout's)."""
    return {"calculator": calculator, "python": python_tool(sandbox or _sandbox)}


__all__ = ["CalculatorInputError", "builtin_tools", "calculator", "evaluate", "python_tool", "use_sandbox"]
