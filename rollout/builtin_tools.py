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

import ast
import operator
import re
from typing import Any

from rlvr.rollout.tools import Tool, tool
from rlvr.sandbox.config import SandboxConfig

_OPS: dict[type, Any] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_MAX_POWER = 64
_MAX_DEPTH = 32
_MAX_CHARS = 256


class CalculatorInputError(ValueError):
    """An expression the calculator does not evaluate (the model is told why)."""


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression; ``CalculatorInputError`` saying why not."""
    if len(expression) > _MAX_CHARS:
        raise CalculatorInputError(f"expression longer than {_MAX_CHARS} characters")
    text = expression.strip().rstrip("=").replace("×", "*").replace("^", "**")
    text = re.sub(r"(?<![\d.])0+(?=\d)", "", text)  # "37*04": leading zeros are not Python, but are numbers
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculatorInputError(f"not an arithmetic expression: {expression!r}") from None
    return _value(tree.body, 0)


def _value(node: ast.AST, depth: int) -> int | float:
    if depth > _MAX_DEPTH:
        raise CalculatorInputError("expression nested too deeply")
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand, depth + 1)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, depth + 1), _value(node.right, depth + 1)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_POWER:
            raise CalculatorInputError(f"exponent above {_MAX_POWER}")
        try:
            return _OPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise CalculatorInputError("division by zero") from None
    raise CalculatorInputError("only numbers, + - * / // % ** and parentheses")


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
