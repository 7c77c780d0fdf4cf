"""Hand-written hard answer forms for the math corpus, by family.

Each entry is ``(answer, gold, label)`` or ``(answer, gold, label, note)``;
the note names the policy that decides a case where verifiers could differ.
``EXPR`` forms are also wrapped in the ways a model writes them (bare, in a
``\\boxed{}`` at the end of a sentence, after "the answer is", and as the
last LaTeX of prose); ``SENTENCES`` are whole responses already.

Families (issue 11): ``bare_latex`` (LaTeX answers with no ``\\boxed``),
``localised`` (decimal commas, spaced thousands, prose in other languages),
``units`` (units, words, ``\\textbf``, pct/percentage, degrees after the
answer), ``structure`` (matrices over several lines, answers equal only after
simplification). ``worked_gold`` (golds that are whole solutions) is built in
``math_corpus`` from the data sets.
"""

from __future__ import annotations

EXPR: dict[str, list[tuple]] = {
    "bare_latex": [
        ("\\frac{10}{9}", "\\frac{10}{9}", True),
        ("\\frac{10}{9}", "9", False),
        ("\\frac{10}{9}", "\\frac{9}{10}", False),
        ("x^2 - 2x + 2", "x^2-2x+2", True),
        ("x^2 - 2x + 2", "2", False, "bare: the whole response is one expression; last number (2) is never tried on it"),
        ("x^2 - 2x + 2", "x^2+2x+2", False),
        ("(6, 1)", "(6,1)", True),
        ("(6, 1)", "1", False),
        ("(1, 6)", "(6,1)", False, "ordered: a point's coordinates keep their order"),
        ("\\sqrt3", "\\sqrt{3}", True),
        ("\\sqrt3", "3", False),
        ("2\\sqrt3", "\\sqrt{12}", True),
        ("\\sqrt2", "\\sqrt{3}", False),
        ("\\dfrac{2}{3}", "\\frac23", True),
        ("\\tfrac{2}{3}", "\\frac{2}{3}", True),
        ("\\cfrac{2}{3}", "\\frac{2}{3}", True),
        ("\\dfrac{3}{2}", "\\frac{2}{3}", False),
        ("\\frac13", "\\frac{1}{3}", True),
        ("\\frac31", "\\frac{1}{3}", False, "bare: read whole as 3/1; the old verifier's last number gave 1"),
        ("\\frac3{4}", "\\frac{3}{4}", True),
        ("\\frac3{4}", "4", False),
        ("\\left( 2, -3 \\right)", "(2,-3)", True),
        ("\\left( -3, 2 \\right)", "(2,-3)", False),
        ("\\left[ 0, \\frac{\\pi}{2} \\right]", "\\left[ 0, \\frac{\\pi}{2} \\right]", True),
        ("k = \\frac{1}{3}", "\\frac{1}{3}", True),
        ("k = \\frac{1}{3}", "3", False),
        ("x = -\\frac{5}{2}", "-\\frac52", True),
        ("x = \\frac{5}{2}", "-\\frac52", False),
        ("[-2, 5)", "[-2,5)", True),
        ("[-2, 5]", "[-2,5)", False, "brackets: closed and half-open intervals differ"),
        ("(-\\infty, 1) \\cup (3, \\infty)", "(-\\infty,1)\\cup(3,\\infty)", True),
        ("(3, \\infty) \\cup (-\\infty, 1)", "(-\\infty,1)\\cup(3,\\infty)", True),
        ("(-\\infty, 1] \\cup (3, \\infty)", "(-\\infty,1)\\cup(3,\\infty)", False),
        ("(-\\infty, 1) \\cup (4, \\infty)", "(-\\infty,1)\\cup(3,\\infty)", False),
        ("3 + 4i", "3+4i", True),
        ("4i + 3", "3+4i", True),
        ("3 - 4i", "3+4i", False),
        ("\\frac{1}{2} + \\frac{\\sqrt{3}}{2}i", "\\frac{1+i\\sqrt{3}}{2}", True),
        ("\\frac{1}{2} - \\frac{\\sqrt{3}}{2}i", "\\frac{1+i\\sqrt{3}}{2}", False),
        ("-\\frac{1}{2}", "-0.5", True),
        ("\\frac{\\pi}{4}", "\\pi/4", True),
        ("\\frac{\\pi}{3}", "\\pi/4", False),
        ("\\{1, 2, 3\\}", "\\{3, 1, 2\\}", True),
        ("\\{1, 2\\}", "\\{3, 1, 2\\}", False),
        ("-2, 3", "3, -2", True),
        ("-2, 4", "3, -2", False),
        ("\\frac{x+1}{x-1}", "\\frac{1+x}{x-1}", True),
        ("\\frac{x+1}{x-1}", "\\frac{x-1}{x+1}", False),
    ],
    "units": [
        ("\\frac{1}{3} \\text{meters}", "\\frac13", True),
        ("\\frac{1}{3} \\text{ meters}", "3", False),
        ("12 \\text{ cm}^2", "12", True),
        ("13 \\text{ cm}^2", "12", False),
        ("\\textbf{42}", "42", True, "units: \\textbf is a label around the value; math-verify alone does not read a bare \\textbf"),
        ("\\textbf{41}", "42", False),
        ("15 \\text{ pct}", "15\\%", True),
        ("15 pct", "15", True, "percent: 15% against 15 is the same answer written with or without %"),
        ("15 percentage", "15\\%", True),
        ("15 \\text{ percent}", "0.15", True, "percent: the word becomes \\%, then 15% = 0.15"),
        ("16 pct", "15", False),
        ("45^\\circ", "45", True),
        ("45 \\text{ degrees}", "45^\\circ", True),
        ("45°", "45", True),
        ("135^\\circ", "45", False),
        ("\\$18.90", "18.9", True),
        ("\\$18.09", "18.9", False),
        ("7 \\text{ apples}", "7", True),
        ("5 \\mbox{ inches}", "5", True),
        ("20 \\text{ dollars}", "21", False),
        ("3.5 \\text{ hours}", "\\frac72", True),
        ("2 \\text{ km}", "2000", False, "units: no unit conversion; 2 km is read as 2"),
        ("864 \\text{ inches}^2", "864", True),
        ("60 \\text{ miles}", "60", True),
    ],
    "structure": [
        ("\\begin{pmatrix}\n 1 & 2 \\\\\n 3 & 4\n\\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", True),
        ("\\begin{bmatrix}\n1 & 2 \\\\\n3 & 4\n\\end{bmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", True),
        ("\\begin{pmatrix}\n 1 & 3 \\\\\n 2 & 4\n\\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", False),
        ("\\begin{pmatrix}\n -7 \\\\\n 16 \\\\\n 5\n\\end{pmatrix}", "\\begin{pmatrix} -7 \\\\ 16 \\\\ 5 \\end{pmatrix}", True),
        ("\\begin{pmatrix}\n -7 \\\\\n 5 \\\\\n 16\n\\end{pmatrix}", "\\begin{pmatrix} -7 \\\\ 16 \\\\ 5 \\end{pmatrix}", False),
        ("\\begin{pmatrix} \\frac{1}{2} \\\\ -1 \\end{pmatrix}", "\\begin{pmatrix} 0.5 \\\\ -1 \\end{pmatrix}", True),
        ("1 + \\frac{2\\sqrt3}{3}", "\\frac{3+2\\sqrt3}{3}", True),
        ("1 + \\frac{2\\sqrt3}{3}", "\\frac{3+\\sqrt3}{3}", False),
        ("\\frac{7!}{16}", "315", True),
        ("\\frac{7!}{16}", "316", False),
        ("2^{10} - 24", "1000", True),
        ("\\binom{6}{2}", "15", True),
        ("\\binom{6}{3}", "15", False),
        ("\\frac{\\sqrt{6}}{2}", "\\sqrt{\\frac{3}{2}}", True),
        ("\\frac{\\sqrt{6}}{3}", "\\sqrt{\\frac{3}{2}}", False),
        ("(x+1)(x-1)", "x^2-1", True),
        ("(x+1)^2", "x^2-1", False),
        ("\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}", True),
        ("\\frac{2}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}", False),
        ("\\log_2 32", "5", True),
        ("3\\sqrt{2} + \\sqrt{8}", "5\\sqrt{2}", True),
        ("3\\sqrt{2} + \\sqrt{8}", "6\\sqrt{2}", False),
        ("\\frac{6}{8}", "0.75", True),
        ("\\frac{6}{9}", "0.75", False),
    ],
}

# Whole responses: (response, gold, label[, note]).
SENTENCES: dict[str, list[tuple]] = {
    "localised": [
        ("1000,99", "1000.99", True, "decimal_comma: two digits after the comma"),
        ("1000,99", "1000.9", False),
        ("0,111", "0.111", True, "decimal_comma: 0,xxx cannot group thousands"),
        ("0,111", "111", False),
        ("1 000", "1000", True),
        ("1 000 000", "10^6", True),
        ("1 000", "100", False),
        ("2,5", "2.5", True, "decimal_comma"),
        ("2,5", "25", False),
        ("3,75", "\\frac{15}{4}", True),
        ("12 345,6", "12345.6", True),
        ("12 345,6", "12345", False, "decimal_comma: spaced thousands then a decimal comma; math-verify alone reads 12345"),
        ("1,000", "1000", True, "decimal_comma: exactly three digits after one comma group thousands"),
        ("1,000", "1", False),
        ("1\u00a0000", "1000", True),
        ("1\\,000", "1000", True),
        ("10{,}000", "10000", True),
        ("-0,25", "-\\frac14", True),
        ("$1\\,250$", "1250", True),
        ("Die Antwort ist 1 000 €.", "1000", True),
        ("Die Antwort ist 1 000 €.", "100", False),
        ("Il a payé 12,50 € au total.", "12.5", True),
        ("Il a payé 12,50 € au total.", "1250", False),
        ("La respuesta es 45 euros.", "45", True),
        ("La respuesta es 45 euros.", "44", False),
        ("Итого: 1 250 рублей.", "1250", True),
        ("Итого: 1 250 рублей.", "125", False),
        ("Der Preis beträgt 3,5 Euro.", "3.5", True),
        ("Der Preis beträgt 3,5 Euro.", "35", False),
        ("Elle a 1 200,50 € d'économies.", "1200.5", True),
        ("Elle a 1 200,50 € d'économies.", "1200", False, "localise_prose: 1 200,50 is 1200.50; math-verify alone stops at 1200"),
        ("Ergebnis: $x = 0,75$", "\\frac34", True),
        ("Ergebnis: $x = 0,75$", "75", False),
        ("Il reste donc 2 500 litres dans la cuve.", "2500", True),
        ("Il reste donc 2 500 litres dans la cuve.", "2000", False),
        ("La risposta è 7,25.", "7.25", True),
        ("La risposta è 7,25.", "725", False),
        ("4.35", "4,35", True, "decimal_comma: a gold written 4,35 against a response 4.35"),
        ("4.53", "4,35", False),
        ("0.25", "0,25", True),
    ],
    "units": [
        ("The final answer is 12 pct.", "12\\%", True),
        ("She scored 85 percent on the test.", "85", True),
        ("She scored 85 percent on the test.", "80", False),
        ("The angle measures $30^\\circ$.", "30", True),
        ("The angle measures $30^\\circ$.", "60", False),
        ("So the rope is $\\frac{1}{3} \\text{meters}$ long.", "\\frac13", True),
        ("**Answer:** \\textbf{14}", "14", True),
        ("**Answer:** \\textbf{14}", "15", False),
        ("It costs \\$2.50 in total.", "2.5", True, "last_number: math-verify finds nothing in this prose; the last number is the last resort"),
        ("Final Answer: The width of the garden is 12 meters.", "12", True, "answer_is: a prose sentence after the marker is searched, not read whole"),
        ("Final Answer: The width of the garden is 12 meters.", "13", False),
        ("The code is XQ7B, so the answer is unclear.", "7", False, "last_number: a digit glued to letters is no number"),
    ],
    "structure": [
        ("The roots are $\\boxed{-3} \\quad \\text{and} \\quad \\boxed{5}$.", "5, -3", True, "boxed: boxes joined by \\quad \\text{and} \\quad are one answer"),
        ("The roots are $\\boxed{-3} \\quad \\text{and} \\quad \\boxed{5}$.", "5", False),
        ("We get $\\boxed{(1, 4)}$ \\text{ for the first and } $\\boxed{(2, 3)}$.", "(1, 4), (2, 3)", True),
        ("First $\\boxed{12}$, then doubling gives $\\boxed{24}$.", "24", True, "boxed: boxes in separate statements are not joined; the last one answers"),
        ("So the step gives \\boxed{40}. Adding the rest we get 45.\nFinal Answer: The final answer is $45$.", "45", True, "answer_is: a final-answer marker after the last box wins"),
        ("So the step gives \\boxed{40}. Adding the rest we get 45.\nFinal Answer: The final answer is $45$.", "40", False),
        ("Thus \\boxed{44}, and our answer is correct.", "44", True, "boxed: 'answer is correct' is no final-answer marker"),
        ("$$\\boxed{(x, y) = (2, 7) \\quad \\text{and} \\quad (7, 2)}$$", "(2, 7), (7, 2)", True, "equation: (x, y) = ... names its unknowns"),
    ],
}


def hard_cases() -> list[dict]:
    """The hard forms as corpus rows (without ids)."""
    rows: list[dict] = []
    wrappers = (
        ("bare", "{a}"),
        ("boxed", "Putting it together, the final answer is $\\boxed{{{a}}}$."),
        ("answer_is", "We simplify step by step.\n\nThe answer is ${a}$"),
        ("prose", "Combining the two cases we get\n\\[\n{a}\n\\]"),
    )
    for family, forms in EXPR.items():
        for k, (answer, gold, label, *note) in enumerate(forms):
            # Each form in every wrapper would repeat itself; two wrappers per
            # form, rotating, cover all four across the family.
            for form, template in (wrappers[k % 4], wrappers[(k + 1) % 4]):
                rows.append(
                    {"family": family, "form": form, "response": template.format(a=answer), "gold": gold, "label": label, "note": note[0] if note else ""}
                )
    for family, forms in SENTENCES.items():
        for response, gold, label, *note in forms:
            rows.append({"family": family, "form": "sentence", "response": response, "gold": gold, "label": label, "note": note[0] if note else ""})
    return rows


__all__ = ["EXPR", "SENTENCES", "hard_cases"]
