"""A group's reference to its samples (``BodyRef``, issue 46): the form validation admits before any
read, one rule per hostile reference, and the message and its body decoded old and new."""

from __future__ import annotations

import hashlib

import pytest

from rlvr.protocol import decode, encode
from rlvr.protocol.groups import BodyRef, GroupBody, SampleGroup, ScoredGroup
from rlvr.protocol.validate import (MAX_TOKENS, MessageInvalidError, check_sample_group, check_scored_group,
                                    check_sample)
from rlvr.protocol.samples import Verdict
from tests.actors.bodies_helpers import long_sample
from tests.factories import make_group

SHA = hashlib.sha256(b"body").hexdigest()


def body_name(task_id: str, sha: str) -> str:
    return f"{task_id}/{sha}"  # the form protocol.groups.body_name gives


def _ref(task_id: str = "t-t0", sha: str = SHA, size: int = 100, name: str | None = None) -> BodyRef:
    return BodyRef(name if name is not None else body_name(task_id, sha), sha, size)


def _referenced(ref: BodyRef, task_id: str = "t-t0") -> SampleGroup:
    return SampleGroup("t", task_id, [], body=ref)


def test_a_reference_of_its_own_task_is_admitted_and_decodes_as_sent():
    group = _referenced(_ref())
    check_sample_group(group)
    assert decode(encode(group), SampleGroup) == group
    scored = ScoredGroup("t", "t-t0", [], [Verdict(1.0, "ok", "exact")], body=_ref())
    check_scored_group(scored)
    assert decode(encode(scored), ScoredGroup) == scored


def test_an_inline_group_encodes_without_the_body_field_as_before_issue_46():
    """``omit_defaults``: an inline group's bytes do not change, so an older reader decodes them."""
    group = make_group(n=2)
    assert b"body" not in encode(group)
    assert decode(encode(group), SampleGroup).body is None


@pytest.mark.parametrize("ref, field", [
    (_ref(task_id="t-t1"), "body.name"),  # another task's body
    (_ref(name=f"rlvr-other-bodies/t-t0/{SHA}"), "body.name"),  # a name with another run's prefix
    (_ref(name=f"../t-t0/{SHA}"), "body.name"),
    (_ref(name="t-t0/" + "0" * 64), "body.name"),  # the name and the digest disagree
    (_ref(sha="ABC"), "body.sha256"),
    (_ref(sha=SHA.upper()), "body.sha256"),
    (_ref(size=0), "body.size"),
])
def test_a_reference_to_anything_but_its_own_group_s_body_is_refused_naming_the_field(ref, field):
    with pytest.raises(MessageInvalidError) as e:
        check_sample_group(_referenced(ref))
    assert e.value.reason.startswith(field)
    with pytest.raises(MessageInvalidError) as e:
        check_scored_group(ScoredGroup("t", "t-t0", [], [Verdict(1.0, "ok", "exact")], body=ref))
    assert e.value.reason.startswith(field)


def test_a_group_that_carries_samples_and_a_reference_is_refused():
    group = make_group(n=1)
    with pytest.raises(MessageInvalidError, match="samples holds 1 samples and body names them too"):
        check_sample_group(SampleGroup(group.run, group.task_id, group.samples, body=_ref(group.task_id)))


def test_a_referenced_scored_group_s_verdicts_are_checked_before_its_body_is_read():
    bad = Verdict(float("nan"), "ok", "exact")
    with pytest.raises(MessageInvalidError, match=r"verdicts\[0\].reward"):
        check_scored_group(ScoredGroup("t", "t-t0", [], [bad], body=_ref()))
    with pytest.raises(MessageInvalidError, match="verdicts holds 0"):
        check_scored_group(ScoredGroup("t", "t-t0", [], [], body=_ref()))


def test_a_group_body_decodes_with_the_project_s_decoder():
    body = GroupBody([long_sample("t", "t-t0", 0, 1, 10)])
    assert decode(encode(body), GroupBody) == body


def test_a_completion_of_a_million_tokens_is_a_valid_sample():
    """MAX_TOKENS was 131,072: a 1M-token agent episode could not even be validated."""
    assert MAX_TOKENS >= 1_000_000
    check_sample(long_sample("t", "t-t0", 0, 1, 1_000_000))
