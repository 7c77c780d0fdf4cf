"""pass@k with the unbiased estimator (Chen et al., 2021, "Evaluating Large
Language Models Trained on Code", eq. 1):

    pass@k = E_problems[ 1 - C(n - c, k) / C(n, k) ]

for n samples per problem of which c are correct. Computed as a running
product for numerical stability, as in the paper's reference code.
"""

from __future__ import annotations


def pass_at_k(n: int, c: int, k: int) -> float:
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got {n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(correct_counts: list[int], n: int, k: int) -> float:
    if not correct_counts:
        return 0.0
    return sum(pass_at_k(n, c, k) for c in correct_counts) / len(correct_counts)
