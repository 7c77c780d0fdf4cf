"""The math verifier: answer extraction and equivalence with a gold answer.

``score_math(response, MathParams(gold=...)) -> Verdict`` is the entry
point. math-verify is the parsing and equivalence engine; the modules here are
what the project adds around it: ``extract`` (where the answer is, and the
route that found it), ``engine`` (math-verify behind guards against absurd
inputs, its own timeouts off), ``policy`` (the named answer policies),
``forms`` (an answer's other written forms: labelled ratios, lists of
solutions, ranges), ``numbers`` (exact numbers and the decimal tolerance
rule), ``scorer`` (the Verdict, and the per-process gold cache).
"""

from rlvr.verify.math.scorer import MathParams, score_math

__all__ = ["MathParams", "score_math"]
