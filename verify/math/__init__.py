"""The math verifier: answer extraction and equivalence with a gold answer.

``score_math(response, MathParams(gold=...)) -> Verdict`` is the entry
point. Modules: ``extract`` (where the answer is), ``normalize`` (text
clean-up), ``structure`` (tuples, sets, intervals, matrices), ``numbers``
(exact numbers and the decimal tolerance policy), ``sympy_parse`` (guarded
LaTeX parsing), ``equivalence`` (the decision), ``scorer`` (the Verdict).
"""

from rlvr.verify.math.scorer import MathParams, score_math

__all__ = ["MathParams", "score_math"]
