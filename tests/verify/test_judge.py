"""The judge, the hybrid, RLPR's verdict and the random control: partial credit, and every failure named."""

from __future__ import annotations

import pytest

from rlvr.actors.secrets import redact
from rlvr.protocol import VerifierSpec
from rlvr.protocol.tasks import ChatMessage
from rlvr.protocol.validate import check_verdict
from rlvr.verify.registry import VerifyContext, resolve
from tests.judge_server import JudgeServer

CTX = VerifyContext(prompt=[ChatMessage("user", "What is 2+2?")], budget_s=30.0, sample_id="t-t0/0")


@pytest.fixture
def judge():
    with JudgeServer() as server:
        yield server


def _judge(server, **params):
    return resolve(VerifierSpec("llm_judge", {"url": server.url, "model": "j", "gold": "4", **params}))


def test_a_judge_score_is_partial_credit_that_reaches_the_verdict_unrounded(judge):
    judge.answer = "7"
    v = _judge(judge)("2+2 is 4", CTX)
    check_verdict(v)
    assert (v.reward, v.outcome, v.components["judge"]) == (pytest.approx(0.7), "ok", pytest.approx(0.7))
    sent = judge.requests[-1]["messages"][0]["content"]
    assert "What is 2+2?" in sent and "Reference answer: 4" in sent and "2+2 is 4" in sent


def test_the_completions_endpoint_and_extra_body_are_sent_as_configured(judge):
    judge.answer = " 3 out of 10"
    v = _judge(judge, endpoint="completions", extra_body={"structured_outputs": {"choice": ["0", "3", "10"]}})("x", CTX)
    assert v.reward == pytest.approx(0.3) and v.outcome == "wrong"
    assert "prompt" in judge.requests[-1] and judge.requests[-1]["structured_outputs"] == {"choice": ["0", "3", "10"]}


@pytest.mark.parametrize("answer", ["I cannot grade this.", "", "42"])
def test_a_garbage_answer_is_a_parse_error_that_quotes_it(judge, answer):
    judge.answer = answer
    v = _judge(judge)("x", CTX)
    assert v.outcome == "parse_error" and v.reward == 0.0 and repr(answer[:20])[1:-1] in v.detail


def test_a_judge_that_does_not_answer_in_time_is_a_timeout(judge):
    judge.delay_s = 3.0
    v = _judge(judge, timeout_s=0.3, retries=0)("x", CTX)
    assert v.outcome == "timeout" and "did not answer in time" in v.detail


def test_transient_failures_are_retried_and_a_refusal_is_an_error(judge):
    judge.fail_first = 2
    assert _judge(judge, retries=2)("x", CTX).outcome == "ok"  # two 503s, then an answer
    judge.fail_first = 5
    v = _judge(judge, retries=1)("x", CTX)
    assert v.outcome == "error" and "kept failing after 1 retries" in v.detail and "503" in v.detail
    judge.fail_first, judge.status = 0, 401
    v = _judge(judge, retries=3)("x", CTX)
    assert v.outcome == "error" and "HTTP 401" in v.detail
    assert len(judge.requests) == 3 + 2 + 1  # a refusal is not retried


def test_an_unreachable_judge_is_an_error_not_a_zero():
    v = resolve(VerifierSpec("llm_judge", {"url": "http://127.0.0.1:9/v1", "model": "j", "retries": 0}))("x", CTX)
    assert v.outcome == "error" and "kept failing" in v.detail


def test_the_api_key_is_sent_and_never_shown(judge, tmp_path):
    key = "sk-test-" + "9" * 24
    (tmp_path / "key").write_text(key + "\n")
    judge.status = 400
    v = _judge(judge, api_key_file=str(tmp_path / "key"))("x", CTX)
    assert judge.headers[-1]["Authorization"] == f"Bearer {key}"
    assert key not in v.detail and key not in redact(f"oops {key}")


def test_hybrid_asks_the_judge_only_when_the_rules_cannot_decide(judge):
    judge.answer = "9"
    spec = {"rules": {"name": "math", "params": {"gold": "4", "strictness": "boxed"}},
            "judge": {"url": judge.url, "model": "j", "gold": "4"}}
    hybrid = resolve(VerifierSpec("hybrid", spec))
    ruled = hybrid("so \\boxed{4}", CTX)
    assert (ruled.outcome, ruled.reward, ruled.components["by_rules"]) == ("ok", 1.0, 1.0) and not judge.requests
    wrong = hybrid("so \\boxed{5}", CTX)
    assert (wrong.outcome, wrong.reward) == ("wrong", 0.0) and not judge.requests
    judged = hybrid("four, I believe", CTX)
    assert judged.components["by_judge"] == 1.0 and judged.reward == pytest.approx(0.9) and len(judge.requests) == 1
    assert "rules could not decide" in judged.detail


def test_hybrid_refuses_a_judge_as_its_rules():
    from rlvr.verify.registry import VerifierSpecError

    with pytest.raises(VerifierSpecError, match="rule-based"):
        resolve(VerifierSpec("hybrid", {"rules": {"name": "llm_judge", "params": {}},
                                        "judge": {"url": "http://x", "model": "j"}}))


def test_rlpr_turns_the_rollouts_measures_into_a_debiased_clipped_reward():
    rlpr = resolve(VerifierSpec("rlpr", {"reference": "4"}))
    m = {"rlpr_found": 1.0, "rlpr_prob": 0.62, "rlpr_prob_base": 0.2, "rlpr_policy_version": 3.0}
    v = rlpr("x", VerifyContext(measures=m))
    assert v.reward == pytest.approx(0.42) and v.outcome == "ok"
    assert rlpr("x", VerifyContext(measures={**m, "rlpr_prob_base": 0.9})).reward == 0.0  # clipped at 0
    raw = resolve(VerifierSpec("rlpr", {"reference": "4", "debias": False}))
    assert raw("x", VerifyContext(measures=m)).reward == pytest.approx(0.62)
    assert rlpr("x", VerifyContext(measures={"rlpr_found": 0.0})).outcome == "parse_error"
    missing = rlpr("x", VerifyContext())
    assert missing.outcome == "error" and "did not measure" in missing.detail


def test_the_random_control_is_bernoulli_p_and_the_same_for_the_same_sample():
    spec = resolve(VerifierSpec("random", {"p": 0.3, "seed": 7}))
    rewards = [spec("anything", VerifyContext(sample_id=f"t-t{k}/0")).reward for k in range(4000)]
    assert abs(sum(rewards) / len(rewards) - 0.3) < 0.03
    again = [spec("other text", VerifyContext(sample_id=f"t-t{k}/0")).reward for k in range(4000)]
    assert rewards == again  # seeded by the id: a redelivered sample gets the same reward
    other_seed = resolve(VerifierSpec("random", {"p": 0.3, "seed": 8}))
    assert rewards != [other_seed("x", VerifyContext(sample_id=f"t-t{k}/0")).reward for k in range(4000)]
    assert spec("x", VerifyContext()).outcome == "error"  # no id to seed on: said, not a silent 0
