"""The answer forms the math verifier still refused on held-out labelled answers (issue 44, section 6),
each written the several ways a model writes it, with near misses that must stay wrong.

Kinds: a labelled ratio against a bare one; the last sentence in Chinese or French prose; decimals
for fractions inside a matrix; solution pairs separated by ``;`` or ``\\quad\\text{and}\\quad``; a
range ("between 12 and 13") boxed badly; a gold written as a sum of two boxes. The policies that
decide them are named in ``verify/math/policy.py`` and ``verify/math/forms.py``.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from rlvr.verify.math import MathParams, score_math
from rlvr.verify.math.extract import extract_boxed
from rlvr.verify.math.forms import range_list, ratio_of, ratios_equal, solution_list
from rlvr.verify.math.numbers import parse_number

INVERSE = "\\begin{pmatrix} \\frac{1}{3} & \\frac{2}{3} \\\\ -\\frac{1}{4} & \\frac{1}{2} \\end{pmatrix}"
ROTATION = "\\begin{pmatrix} \\frac{3}{5} & -\\frac{4}{5} \\\\ \\frac{4}{5} & \\frac{3}{5} \\end{pmatrix}"
PAIRS = "(1, 2), (3, 4)"
SIGNED_PAIRS = "\\left(-1, 0\\right), \\left(\\frac{1}{2}, 3\\right)"
BETWEEN = "12\\text{ and }13"

# (response, gold, right)
KINDS: dict[str, list[tuple[str, str, bool]]] = {
    "ratio": [
        ("$V_1:V_2 = 11:21$", "11:21", True),
        ("The volumes compare as $\\boxed{V_1 : V_2 = 11 : 21}$.", "11:21", True),
        ("Hence the ratio of the volumes is \\[\\boxed{V_1:V_2=11:21}\\]", "11:21", True),
        ("Therefore $\\boxed{AB : BC = 3 : 5}$.", "3:5", True),
        ("So the ratio is $\\boxed{r_1 : r_2 = 1 : 4}$.", "1:4", True),
        ("\\boxed{\\text{red} : \\text{blue} = 2 : 7}", "2:7", True),
        ("\\boxed{[ABC] : [ACD] = 9 : 16}", "9:16", True),
        ("\\boxed{a : b : c = 2 : 3 : 4}", "2:3:4", True),
        ("\\boxed{\\frac{V_1}{V_2} = \\frac{11}{21}}", "11:21", True),
        ("\\boxed{V_1:V_2 = 22:42}", "11:21", True),  # the same ratio, as math-verify reads a:b
        ("The answer is $\\boxed{11:21}$.", "V_1 : V_2 = 11 : 21", True),  # the gold is the labelled one
        ("\\boxed{\\frac{11}{21}}", "V_1:V_2 = 11:21", True),
        ("所以体积之比为 $\\boxed{V_1 : V_2 = 11 : 21}$。", "11:21", True),
        # near misses
        ("\\boxed{V_1 : V_2 = 21 : 11}", "11:21", False),  # reversed
        ("\\boxed{V_1:V_2 = 11:20}", "11:21", False),
        ("\\boxed{AB : BC = 5 : 3}", "3:5", False),
        ("\\boxed{a : b : c = 2 : 4 : 3}", "2:3:4", False),
        ("\\boxed{a : b : c = 1 : 6 : 1}", "1:2:3", False),  # math-verify: (1/6)/1 == (1/2)/3
        ("\\boxed{AB : BC : CD = 3 : 5 : 7}", "3:5", False),  # a term more
        ("\\boxed{V_1 = 11}", "11:21", False),
        ("\\boxed{22:42}", "11:21", False),  # two bare H:MM forms: times of day, not equal
        ("\\boxed{\\frac{21}{11}}", "V_1:V_2 = 11:21", False),
    ],
    "chinese_french_prose": [
        ("答案：12", "12", True),
        ("答案：$\\frac{3}{4}$", "\\frac{3}{4}", True),
        ("因此 $x=\\frac{1}{2}$。", "\\frac12", True),
        ("所以总共有 $3 \\times 12 = 36$ 个鸡蛋。", "36", True),
        ("所以面积是 $\\frac{1}{2} \\times 6 \\times 4 = 12$ 平方厘米。", "12", True),
        ("首先，$15 \\times 4 = 60$。\n然后，$60 - 12 = 48$。\n\n所以小红还剩 $60 - 12 = 48$ 元。", "48", True),
        ("他每天读 $8$ 页，读了 $5$ 天，一共读了 $8 \\times 5 = 40$ 页。", "40", True),
        ("Il y a $3$ boîtes de $12$ œufs, donc $3 \\times 12 = 36$ œufs en tout.", "36", True),
        ("Le périmètre vaut donc $2 \\times (5 + 3) = 16$ cm.", "16", True),
        ("Au total, Paul a parcouru $5 + 7 = 12$ km.", "12", True),
        ("Donc la réponse est $\\dfrac{7}{2}$.", "\\frac72", True),
        ("Il lui reste donc 1 250,50 €.", "1250.5", True),
        ("Il faut donc $120 : 40 = 3$ heures pour faire le trajet.", "3", True),  # ":" divides in French
        ("所以需要 $\\frac{120}{40} = 3$ 小时。", "3", True),
        # near misses
        ("答案：13", "12", False),
        ("所以总共有 $3 \\times 12 = 35$ 个鸡蛋。", "36", False),  # the result it states is wrong
        ("因此 $x=\\frac{1}{3}$。", "\\frac12", False),
        ("所以 $2x + 3 = 11$。", "11", False),  # an equation, not a result
        ("Au total, Paul a parcouru $5 + 7 = 13$ km.", "12", False),
        ("Le périmètre vaut donc $2 \\times (5 + 3) = 18$ cm.", "16", False),
        ("Donc la réponse est $x + 1 = 4$.", "4", False),
        ("Il lui reste donc 1 250,05 €.", "1250.5", False),
        ("Il faut donc $120 : 40 = 4$ heures pour faire le trajet.", "3", False),
    ],
    "matrix_decimals": [
        ("\\boxed{\\begin{pmatrix} \\frac{1}{3} & 0.6667 \\\\ -0.25 & 0.5 \\end{pmatrix}}", INVERSE, True),
        ("\\boxed{\\begin{pmatrix} \\dfrac{1}{3} & 0.6667 \\\\ -0.25 & \\dfrac{1}{2} \\end{pmatrix}}", INVERSE, True),
        ("\\boxed{A^{-1} = \\begin{pmatrix} 0.3333 & 0.6667 \\\\ -0.25 & 0.5 \\end{pmatrix}}", INVERSE, True),
        ("The inverse is\n$$A^{-1} = \\begin{pmatrix} 0.3333 & 0.6667 \\\\ -0.2500 & 0.5000 \\end{pmatrix}$$", INVERSE, True),
        ("\\boxed{\\left(\\begin{array}{cc} 0.3333 & 0.6667 \\\\ -0.25 & 0.5 \\end{array}\\right)}", INVERSE, True),
        ("\\boxed{\\begin{pmatrix} 0.\\overline{3} & 0.\\overline{6} \\\\ -0.25 & 0.5 \\end{pmatrix}}", INVERSE, True),
        ("\\boxed{\\begin{pmatrix} 0.3333 & 0.6667 \\\\ -0.25 & 0.5 \\end{pmatrix}}",
         "\\frac{1}{12}\\begin{pmatrix} 4 & 8 \\\\ -3 & 6 \\end{pmatrix}", True),
        ("\\boxed{\\mathbf{v} = \\begin{pmatrix} 0.2857 \\\\ -0.4286 \\end{pmatrix}}",
         "\\begin{pmatrix} 2/7 \\\\ -3/7 \\end{pmatrix}", True),
        ("\\boxed{R = \\begin{bmatrix} 0.6 & -0.8 \\\\ 0.8 & 0.6 \\end{bmatrix}}", ROTATION, True),
        ("\\boxed{A^{-1} = \\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}}",
         "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", True),  # a matrix's name, no decimals
        ("\\boxed{0.\\overline{6}}", "\\frac{2}{3}", True),
        # near misses
        ("\\boxed{\\begin{pmatrix} 0.333 & 0.667 \\\\ -0.25 & 0.5 \\end{pmatrix}}", INVERSE, False),  # 3 digits
        ("\\boxed{A^{-1} = \\begin{pmatrix} 0.3333 & 0.6667 \\\\ 0.25 & 0.5 \\end{pmatrix}}", INVERSE, False),
        ("\\boxed{\\begin{pmatrix} 0.3333 & -0.25 \\\\ 0.6667 & 0.5 \\end{pmatrix}}", INVERSE, False),  # transposed
        ("\\boxed{\\begin{pmatrix} 0.\\overline{6} & 0.\\overline{3} \\\\ -0.25 & 0.5 \\end{pmatrix}}", INVERSE, False),
        ("\\boxed{\\left(\\begin{array}{cc} 0.3333 & 0.6667 \\\\ -0.2 & 0.5 \\end{array}\\right)}", INVERSE, False),
        ("\\boxed{\\begin{pmatrix} 0.2857 & -0.4286 \\end{pmatrix}}",
         "\\begin{pmatrix} 2/7 \\\\ -3/7 \\end{pmatrix}", False),  # a row for a column
        ("\\boxed{\\begin{pmatrix} 0.3333 & 0.6667 \\\\ -0.25 & 0.5 \\end{pmatrix}}",
         "\\frac{1}{12}\\begin{pmatrix} 4 & 8 \\\\ 3 & 6 \\end{pmatrix}", False),
        ("\\boxed{0.\\overline{3}}", "0", False),  # math-verify reads 0.\overline{3} as 0
        ("\\boxed{0.\\overline{6}}", "\\frac{3}{5}", False),
    ],
    "solution_pairs": [
        ("\\boxed{(x, y) = (1, 2) \\quad\\text{and}\\quad (x, y) = (3, 4)}", PAIRS, True),
        ("\\boxed{(x, y) = (1, 2); (x, y) = (3, 4)}", PAIRS, True),
        ("\\boxed{(x,y) = (3, 4)} \\quad\\text{and}\\quad \\boxed{(x,y) = (1, 2)}", PAIRS, True),
        ("$(x, y) = (1, 2)$ \\quad\\text{and}\\quad $(x, y) = (3, 4)$", PAIRS, True),
        ("\\boxed{(1, 2) \\text{; } (3, 4)}", PAIRS, True),
        ("The solutions are $(1, 2)$; $(3, 4)$.", PAIRS, True),
        ("Les solutions sont $(1, 2)$ et $(3, 4)$.", PAIRS, True),
        ("方程组的解为 $(1, 2)$；$(3, 4)$。", PAIRS, True),
        ("\\boxed{(x, y) = \\left(\\frac{1}{2}, 3\\right) \\text{ or } (x, y) = \\left(-1, 0\\right)}", SIGNED_PAIRS, True),
        ("\\boxed{\\left(\\frac{1}{2}, 3\\right);\\ \\left(-1, 0\\right)}", SIGNED_PAIRS, True),
        ("\\boxed{(1, 2), (3, 4)}", "(x, y) = (1, 2) \\quad\\text{and}\\quad (x, y) = (3, 4)", True),
        ("\\boxed{(a, b) = (2, -1); (a, b) = (-1, 2); (a, b) = (0, 0)}", "(0,0), (2,-1), (-1,2)", True),
        # near misses
        ("\\boxed{(x, y) = (1, 2); (x, y) = (4, 3)}", PAIRS, False),  # one pair's coordinates swapped
        ("\\boxed{(x, y) = (1, 2)}", PAIRS, False),  # a pair missing
        ("\\boxed{(1, 2); (3, 4); (5, 6)}", PAIRS, False),  # a pair too many
        ("\\boxed{(2, 1) \\quad\\text{and}\\quad (4, 3)}", PAIRS, False),
        ("The solutions are $(1, 2)$; $(3, 5)$.", PAIRS, False),
        ("\\boxed{(x, y) = \\left(\\frac{1}{2}, 3\\right) \\text{ or } (x, y) = \\left(1, 0\\right)}", SIGNED_PAIRS, False),
        ("\\boxed{x = 1; y = 2}", PAIRS, False),  # one solution of a system, not the list
    ],
    "range": [
        ("\\boxed{\\text{between 12 and 13}}", BETWEEN, True),
        ("\\boxed{\\text{between } 12 \\text{ and } 13}", BETWEEN, True),
        ("It lies $\\boxed{between 12 and 13}$.", BETWEEN, True),
        ("\\boxed{\\text{Between }12\\text{ and }13}", BETWEEN, True),
        ("\\boxed{12 \\text{ to } 13}", BETWEEN, True),
        ("\\boxed{12 \\text{ and } 13 \\text{ inclusive}}", BETWEEN, True),
        ("So $\\sqrt{20}$ is $\\boxed{\\text{between } 4 \\text{ and } 5}$.", "4\\text{ and }5", True),
        ("\\boxed{\\text{from } 7 \\text{ to } 8}", "7 \\text{ and } 8", True),
        ("\\boxed{12 \\text{ and } 13}", "between 12 and 13", True),
        # near misses
        ("\\boxed{\\text{between 13 and 14}}", BETWEEN, False),
        ("\\boxed{\\text{between } 12 \\text{ and } 14}", BETWEEN, False),
        ("\\boxed{\\text{about } 12}", BETWEEN, False),
        ("\\boxed{12-13}", BETWEEN, False),  # a dash is subtraction
        ("\\boxed{12}", BETWEEN, False),
    ],
    "sum_of_boxes": [
        ("\\boxed{1 + \\sqrt{2}}", "The answer is $\\boxed{1} + \\boxed{\\sqrt{2}}$.", True),
        ("\\boxed{\\sqrt{2} + 1}", "$\\boxed{1}+\\boxed{\\sqrt{2}}$", True),
        ("\\boxed{3 + 2\\sqrt{5}}", "so the sum is $\\boxed{3}+\\boxed{2\\sqrt{5}}$", True),
        ("The answer is $2 - \\sqrt{3}$.", "$\\boxed{2} - \\boxed{\\sqrt{3}}$", True),
        ("\\boxed{\\frac{1 + i\\sqrt{3}}{2}}", "$\\boxed{\\frac{1}{2}} + \\boxed{\\frac{\\sqrt{3}}{2}i}$", True),
        ("\\boxed{-1 - \\sqrt{3}}", "$\\boxed{-1} - \\boxed{\\sqrt{3}}$", True),
        ("\\boxed{5}", "$\\boxed{2} + \\boxed{3}$", True),
        # near misses
        ("\\boxed{\\sqrt{2}}", "The answer is $\\boxed{1} + \\boxed{\\sqrt{2}}$.", False),  # only the last box
        ("\\boxed{1}", "$\\boxed{1}+\\boxed{\\sqrt{2}}$", False),
        ("\\boxed{1 - \\sqrt{2}}", "$\\boxed{1}+\\boxed{\\sqrt{2}}$", False),
        ("\\boxed{2 + \\sqrt{3}}", "$\\boxed{2} - \\boxed{\\sqrt{3}}$", False),
        ("\\boxed{3}", "$\\boxed{2} + \\boxed{3}$", False),
        ("\\boxed{3} + \\boxed{4}", "7", False),  # a sum of boxes left undone restates the question
    ],
}

CASES = [pytest.param(r, g, right, id=f"{kind}-{k}") for kind, cases in KINDS.items() for k, (r, g, right) in enumerate(cases)]


@pytest.mark.parametrize(("response", "gold", "right"), CASES)
def test_each_kind_of_miss_is_right_and_its_near_misses_stay_wrong(response, gold, right):
    verdict = score_math(response, MathParams(gold=gold))
    assert (verdict.outcome == "ok") is right, verdict.detail


def test_every_kind_has_several_right_answers_and_near_misses():
    for kind, cases in KINDS.items():
        assert sum(right for *_, right in cases) >= 6, kind
        assert sum(not right for *_, right in cases) >= 5, kind


@pytest.mark.parametrize(("response", "gold", "policy"), [
    ("\\boxed{V_1:V_2 = 11:21}", "11:21", "ratio"),
    ("所以总共有 $3 \\times 12 = 36$ 个鸡蛋。", "36", "result"),
    ("\\boxed{A^{-1} = \\begin{pmatrix} 0.3333 & 0.6667 \\\\ -0.25 & 0.5 \\end{pmatrix}}", INVERSE, "decimal_in_structure"),
    ("\\boxed{0.\\overline{6}}", "\\frac{2}{3}", "number"),
])
def test_the_deciding_policy_is_named(response, gold, policy):
    assert f"policy={policy};" in score_math(response, MathParams(gold=gold)).detail


def test_ratios_read_with_and_without_a_label():
    assert ratio_of("V_1 : V_2 = 11 : 21") == ratio_of("11:21").__class__((Fraction(11), Fraction(21)), True)
    assert ratio_of("11:21").labelled is False
    assert ratio_of("\\frac{V_1}{V_2} = \\frac{11}{21}").terms == (11, 21)
    for not_a_ratio in ("x = 11", "2x:3 = 4:5", "11", "1:2 = 2:4 = 3:6", "0:0"):
        assert ratio_of(not_a_ratio) is None, not_a_ratio
    assert ratios_equal(ratio_of("2:4:6"), ratio_of("1:2:3"))
    assert not ratios_equal(ratio_of("1:6:1"), ratio_of("1:2:3"))


def test_solution_lists_and_ranges_are_rewritten_only_when_they_are_one():
    assert solution_list("(x, y) = (1, 2) \\quad\\text{and}\\quad (x, y) = (3, 4)") == "(1, 2), (3, 4)"
    assert solution_list("x = 1 \\text{ or } x = -2") == "1, -2"
    for as_written in ("x = 1; y = 2", "(1, 2)", "x = 3", "\\{(1,2); (3,4)\\}", "a = 1, b = 2", "1, 2, 3"):
        assert solution_list(as_written) == as_written
    assert range_list("\\text{between } 12 \\text{ and } 13") == "12, 13"
    for as_written in ("12-13", "12", "\\text{about } 12", "x \\text{ and } y"):
        assert range_list(as_written) == as_written


def test_repeating_decimals_are_exact_and_boxes_joined_by_a_sign_are_one_sum():
    assert parse_number("0.\\overline{3}").value == Fraction(1, 3)
    assert parse_number("1.2\\overline{45}").value == Fraction(137, 110)
    assert parse_number("-0.1\\overline{6}").value == Fraction(-1, 6)
    assert extract_boxed("$\\boxed{2} - \\boxed{1 + \\sqrt{3}}$") == "2 - (1 + \\sqrt{3})"
    assert extract_boxed("\\boxed{1} + \\boxed{-2}") == "1 + (-2)"
    assert extract_boxed("\\boxed{1}, \\boxed{2} + \\boxed{3}") == "2 + 3"  # a sum next to a list: the sum
    assert extract_boxed("\\boxed{6} + \\boxed{8} = \\boxed{14}") == "14"


# --- seeded random answers of each form, judged against their value computed here ----------------
def _ratio_case(rng):
    terms = [rng.randint(1, 30) for _ in range(rng.choice((2, 2, 3)))]
    k = rng.randint(1, 3)
    pred = [t * k for t in terms]
    if rng.random() < 0.5:  # a near miss: one term off, or two terms swapped
        i = rng.randrange(len(pred))
        if rng.random() < 0.5:
            pred[i] += rng.choice((-2, -1, 1, 2)) * k
        else:
            j = (i + 1) % len(pred)
            pred[i], pred[j] = pred[j], pred[i]
    names = rng.choice((["V_1", "V_2", "V_3"], ["AB", "BC", "CD"], ["\\text{red}", "\\text{blue}", "\\text{green}"]))
    label = " : ".join(names[: len(terms)])
    response = f"Hence $\\boxed{{{label} = {' : '.join(map(str, pred))}}}$."
    right = all(p > 0 for p in pred) and all(p * terms[0] == pred[0] * t for p, t in zip(pred, terms))
    return response, ":".join(map(str, terms)), right


def _pairs_case(rng):
    gold = {(rng.randint(-5, 5), rng.randint(-5, 5)) for _ in range(rng.randint(2, 3))}
    pred = set(gold)
    roll = rng.random()
    if roll < 0.2:
        pred.discard(next(iter(sorted(pred))))
    elif roll < 0.4:
        x, y = sorted(pred)[0]
        pred = (pred - {(x, y)}) | {(y, x) if x != y else (x, y + 1)}
    elif roll < 0.55:
        pred.add((9, 9))
    items = [f"(x, y) = ({x}, {y})" if rng.random() < 0.5 else f"({x}, {y})" for x, y in rng.sample(sorted(pred), len(pred))]
    if any(i.startswith("(x") for i in items):
        items = [i if i.startswith("(x") else f"(x, y) = {i}" for i in items]
    sep = rng.choice(("; ", " \\quad\\text{and}\\quad ", " \\text{ or } ", ";\\ "))
    gold_text = ", ".join(f"({x}, {y})" for x, y in sorted(gold))
    return f"The solutions are $\\boxed{{{sep.join(items)}}}$.", gold_text, pred == gold


def _range_case(rng):
    n = rng.randint(-20, 40)
    low, high = (n, n + 1) if rng.random() < 0.5 else rng.choice(((n + 1, n + 2), (n - 1, n), (n, n + 2)))
    form = rng.choice(("\\boxed{{\\text{{between {a} and {b}}}}}", "\\boxed{{\\text{{between }} {a} \\text{{ and }} {b}}}",
                       "$\\boxed{{between {a} and {b}}}$", "\\boxed{{\\text{{from }} {a} \\text{{ to }} {b}}}"))
    return "It lies " + form.format(a=low, b=high), f"{n}\\text{{ and }}{n + 1}", (low, high) == (n, n + 1)


def _matrix_case(rng):
    values = [Fraction(rng.randint(1, 9), rng.choice((3, 6, 7, 9, 11, 12))) * rng.choice((1, -1)) for _ in range(4)]
    values = [v if abs(v) >= Fraction(1, 10) else v * 10 for v in values]
    shown = [f"{float(v):.4f}" for v in values]
    if rng.random() < 0.5:  # a near miss: one entry off by 0.01
        i = rng.randrange(4)
        shown[i] = f"{float(values[i]) + 0.01:.4f}"
    if rng.random() < 0.3:  # one entry left exact
        i = rng.randrange(4)
        shown[i] = f"{'-' if values[i] < 0 else ''}\\frac{{{abs(values[i].numerator)}}}{{{values[i].denominator}}}"
    right = all(shown[j] == f"{float(values[j]):.4f}" or "frac" in shown[j] for j in range(4))
    env = rng.choice(("pmatrix", "bmatrix"))
    name = rng.choice(("", "A^{-1} = ", "M = "))
    response = f"\\boxed{{{name}\\begin{{{env}}} {shown[0]} & {shown[1]} \\\\ {shown[2]} & {shown[3]} \\end{{{env}}}}}"
    exact = [f"{'-' if v < 0 else ''}\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}" for v in values]
    return response, f"\\begin{{pmatrix}} {exact[0]} & {exact[1]} \\\\ {exact[2]} & {exact[3]} \\end{{pmatrix}}", right


@pytest.mark.parametrize("make", [_ratio_case, _pairs_case, _range_case, _matrix_case])
def test_seeded_random_answers_of_each_form_are_judged_by_their_value(make):
    import random

    rng = random.Random(44)
    cases = [make(rng) for _ in range(40)]
    assert 8 <= sum(right for *_, right in cases) <= 32  # both right answers and near misses drawn
    wrong = [(r, g, right, score_math(r, MathParams(gold=g)).detail) for r, g, right in cases
             if (score_math(r, MathParams(gold=g)).outcome == "ok") is not right]
    assert not wrong, wrong
