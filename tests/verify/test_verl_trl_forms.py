"""verl 0.9.1's scorers and TRL 0.29.1's docs Example 1, vendored unchanged (tests/data/peer_rewards/),
taken as plug-ins and scoring exactly what they return when called directly the way their framework
calls them: verl's ``default_compute_score`` calls a scorer positionally, ``scorer(solution_str,
ground_truth)``; TRL's ``_calculate_rewards`` calls ``reward_func(prompts=..., completions=...,
completion_ids=..., **columns)``.

Before issue 44, a function was taken only when it declared ``solution_str`` or ``completions``:
TRL's ``reward_func(completion_ids, **kwargs)``, ``math_verify.compute_score(model_output,
ground_truth)`` and ``geo3k.compute_score(predict_str, ground_truth)`` were refused, with a pointer
to a page that showed no form; a verl scorer got ``ground_truth=None`` for a case without gold and
crashed inside; and ``math_dapo``'s extracted answer (``pred``) was dropped.
"""

from __future__ import annotations

import ast
import json
import re

import pytest

from rlvr.cli.main import main
from rlvr.protocol import VerifierSpec
from rlvr.verify.registry import VerifierPluginError, VerifierSpecError, VerifyContext, load_plugins, resolve
from rlvr.verify.reward_fns import FORMS_DOC, adapt, convention_of, reward_function
from tests.conftest import REPO
from tests.data.peer_rewards import trl_doc_forms, trl_grpo_example_1, verl_geo3k, verl_gsm8k, verl_math_dapo
from tests.data.peer_rewards import verl_math_verify, verl_prime_code
from tests.test_readme import anchors

PEER = "tests.data.peer_rewards"
CORPUS = REPO / "tests" / "verify" / "data" / "math_corpus.jsonl"


def _corpus(every: int) -> list[dict]:
    """Every ``every``-th boxed answer of the math corpus (real SmolLM2 answers and hand-written hard forms,
    labelled): geo3k reads only a ``\\boxed{}`` answer, so unboxed ones would all score 0."""
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    return [r for r in rows if "\\boxed" in r["response"]][::every]


def _audit(plugin: str, cases: list[dict], tmp_path, capsys) -> tuple[int, dict, dict[str, dict], str]:
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    out = tmp_path / "verdicts.jsonl"
    code = main(["audit", "--verifier", plugin, "--input", str(path), "--output", str(out), "--json",
                 "--pool-size", "1", "--timeout-s", "300"])
    captured = capsys.readouterr()
    summary = json.loads(captured.out.splitlines()[-1])
    rows = {v["id"]: v for v in map(json.loads, out.read_text().splitlines())}
    return code, summary, rows, captured.err


@pytest.mark.parametrize("fn, convention", [
    (verl_math_verify.compute_score, "verl_scorer"),  # (model_output, ground_truth, timeout_score=0, timeout=30.0)
    (verl_geo3k.compute_score, "verl_scorer"),  # (predict_str, ground_truth, use_boxed=True, format_score=0.1)
    (verl_math_dapo.compute_score, "verl"),  # (solution_str, ground_truth, ...): the same two, by keyword
    (verl_gsm8k.compute_score, "verl"),
    (trl_grpo_example_1.reward_func, "trl"),  # (completion_ids, **kwargs)
    (trl_doc_forms.reward_len, "trl"),
    (verl_prime_code.compute_score, None),  # (completion, test_cases, continuous=False): the names do not say
])
def test_the_convention_is_read_from_the_names_each_framework_uses(fn, convention):
    assert convention_of(fn) == convention


@pytest.mark.parametrize("scorer", ["verl_math_verify", "verl_geo3k"])
def test_a_verl_scorer_is_called_positionally_and_scores_what_it_returns(scorer, tmp_path, capsys):
    cases = [{"id": c["id"], "response": c["response"], "gold": c["gold"], "label": c["label"]} for c in _corpus(2)]
    code, summary, rows, err = _audit(f"{PEER}.{scorer}:compute_score", cases, tmp_path, capsys)
    assert code == 0 and summary["outcomes"].get("error", 0) == 0, (summary, err)
    compute_score = {"verl_math_verify": verl_math_verify, "verl_geo3k": verl_geo3k}[scorer].compute_score
    direct = {c["id"]: float(compute_score(c["response"], c["gold"])) for c in cases}
    assert {i: r["reward"] for i, r in rows.items()} == direct
    assert len(set(direct.values())) > 1  # right and wrong answers both present: not a constant


def test_trl_docs_example_1_is_called_with_keywords_and_scores_what_it_returns(tmp_path, capsys):
    cases = [{"id": f"c{n}", "response": text, "prompt": "The sky is", "completion_ids": ids}
             for n, (text, ids) in enumerate([(" blue.", [6303, 13]), (" in the sky.", [304, 279, 12884, 13]),
                                              ("", [])])]
    code, summary, rows, err = _audit(f"{PEER}.trl_grpo_example_1:reward_func", cases, tmp_path, capsys)
    assert code == 0, (summary, err)
    direct = {c["id"]: trl_grpo_example_1.reward_func(prompts=[c["prompt"]], completions=[c["response"]],
                                                      completion_ids=[c["completion_ids"]])[0] for c in cases}
    assert direct == {"c0": 2.0, "c1": 4.0, "c2": 0.0}  # what TRL's docs say it returns
    assert {i: r["reward"] for i, r in rows.items()} == direct


def test_a_trl_function_that_reads_completion_ids_never_scores_missing_ids_as_zero():
    load_plugins([f"{PEER}.trl_grpo_example_1:reward_func"])
    bound = resolve(VerifierSpec(f"{PEER}.trl_grpo_example_1:reward_func", {}))
    v = bound("a non-empty completion", VerifyContext())
    assert v.outcome == "error" and "completion_ids" in v.detail


def test_math_dapo_s_extracted_answer_is_the_verdict_s(tmp_path, capsys):
    cases = [{"id": "right", "response": "so the answer is \\boxed{42}", "gold": "42", "label": True},
             {"id": "wrong", "response": "Answer: 41", "gold": "42", "label": False}]
    code, summary, rows, err = _audit(f"{PEER}.verl_math_dapo:compute_score", cases, tmp_path, capsys)
    assert code == 0 and summary["agreement"] == 1.0, (summary, err)
    for c in cases:
        direct = verl_math_dapo.compute_score(c["response"], c["gold"])
        row = rows[c["id"]]
        assert (row["reward"], row["extracted"]) == (direct["score"], direct["pred"])
    assert rows["wrong"]["extracted"] == "41"


def test_a_case_without_gold_for_a_verl_function_is_an_error_that_names_it(tmp_path, capsys):
    cases = [{"id": "has-gold", "response": "Answer: 5", "gold": "5", "label": True},
             {"id": "no-gold", "response": "Answer: 5", "label": True}]
    code, summary, rows, err = _audit(f"{PEER}.verl_math_dapo:compute_score", cases, tmp_path, capsys)
    assert code == 1
    assert summary["spec_errors"] == ["no-gold"] and rows["has-gold"]["outcome"] == "ok"
    assert "no 'gold'" in rows["no-gold"]["detail"] and "no 'gold'" in summary["failed"][0]["detail"]
    # In a run the spec is refused the same way (the sample is dead-lettered with this reason).
    with pytest.raises(VerifierSpecError, match="no 'gold'"):
        resolve(VerifierSpec(f"{PEER}.verl_math_verify:compute_score", {}))


def test_a_scorer_the_names_do_not_settle_is_taken_in_its_explicit_form(tmp_path, capsys):
    """verl's prime_code: refused by name, taken when the user's module says "verl_scorer"; its
    tuple return read as verl's dispatcher reads it (``float(res[0])``), partial credit kept."""
    with pytest.raises(VerifierPluginError, match=re.escape(FORMS_DOC)):
        load_plugins([f"{PEER}.verl_prime_code:compute_score"])
    tests = json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]})
    program = "```python\na, b = map(int, input().split())\nprint({})\n```"
    cases = [{"id": "right", "response": program.format("a + b"), "gold": tests, "label": True},
             {"id": "half", "response": program.format("3"), "gold": tests, "label": True},
             {"id": "wrong", "response": program.format("a * b"), "gold": tests, "label": False}]
    code, summary, rows, err = _audit(f"{PEER}.my_peer_rewards:PRIME_CODE", cases, tmp_path, capsys)
    assert code == 0 and summary["agreement"] == 1.0, (summary, err)
    direct = {c["id"]: float(verl_prime_code.compute_score(c["response"], tests, continuous=True)[0]) for c in cases}
    assert direct == {"right": 1.0, "half": 0.5, "wrong": 0.0}
    assert {i: r["reward"] for i, r in rows.items()} == direct


def both_frameworks(completions, solution_str="", **kwargs):
    return [1.0]


def test_a_function_with_both_frameworks_names_is_refused_and_taken_when_told_which():
    with pytest.raises(VerifierPluginError, match="both verl's solution_str and TRL's"):
        adapt(both_frameworks, "m:both_frameworks")
    verifier = reward_function(both_frameworks, "trl")
    assert verifier.fn("x", verifier.params(), VerifyContext()).reward == 1.0
    with pytest.raises(VerifierPluginError, match="'three_args' \\(verl_scorer convention\\) requires 'c'"):
        reward_function(lambda a, b, c: 1.0, "verl_scorer", name="three_args")
    with pytest.raises(VerifierPluginError, match="convention 'verl_scorers' is not one of"):
        reward_function(both_frameworks, "verl_scorers")  # type: ignore[arg-type]


def _forms_section() -> str:
    text = (REPO / FORMS_DOC.partition("#")[0]).read_text()
    section = text[text.index("## Reward functions from verl and TRL"):]
    return section[:section.index("\n## ", 1)]


def test_the_refusal_points_at_a_section_that_shows_every_accepted_form():
    with pytest.raises(VerifierPluginError) as refused:
        adapt(lambda text, answer: 1.0, "m:f")
    page, _, anchor = FORMS_DOC.partition("#")
    assert FORMS_DOC in str(refused.value) and anchor in anchors(REPO / page)
    section = _forms_section()
    for form in ("compute_score(data_source, solution_str, ground_truth, extra_info=None",  # verl's managers
                 "compute_score(model_output, ground_truth",  # verl's math_verify and prime_math scorers
                 "compute_score(predict_str, ground_truth",  # verl's geo3k scorer
                 "def reward_func(completion_ids, **kwargs)",  # TRL's docs, Example 1
                 "reward_len(completions, **kwargs)",
                 'reward_function(partial(prime_code.compute_score, continuous=True), "verl_scorer")'):
        assert form in section, form


def test_each_function_the_section_shows_is_taken_as_the_convention_it_is_shown_under():
    """The page's own blocks, each def compiled alone: the three conventions' blocks, in the page's order."""
    blocks = re.findall(r"^```python\n(.*?)^```", _forms_section(), re.S | re.M)
    shown = [b for b in blocks if "import " not in b]  # the explicit form's block imports verl: not here
    assert len(shown) == 3
    for block, convention in zip(shown, ["verl", "verl_scorer", "trl"]):
        defs = [node for node in ast.parse(block).body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        assert defs, block
        for node in defs:
            namespace: dict = {}
            exec(compile(ast.Module([node], type_ignores=[]), "docs/rewards.md", "exec"), namespace)
            assert convention_of(namespace[node.name]) == convention, ast.unparse(node)
