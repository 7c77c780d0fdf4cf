"""A safe evaluator for model-written arithmetic: no ``eval``, bounded size, depth and exponent.

The calculator tool (``rlvr.rollout.builtin_tools``) and the arithmetic-step
verifier (``rlvr.verify.steps``) read expressions a model wrote with it: a
Python ``ast`` of numbers, ``+ - * / // % **``, unary signs and parentheses,
nothing else (no names, calls or attributes). ``×`` and ``^`` read as ``*``
and ``**``; leading zeros as numbers ("04").
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Any

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


__all__ = ["CalculatorInputError", "evaluate"]
