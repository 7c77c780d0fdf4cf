"""Poison messages on every consumed subject, against real roles on a real nats-server.

Each case publishes one poison message and then a good one to a running
role: the poison must be dead-lettered with its reason, counted in the
role's heartbeat (``dead_letter.<kind>``), and the role must stay up and
still serve the good message after it. ROLLOUTS and SCORED carry one message
per task's group (protocol/groups.py): a poisoned sample or verdict is one
member of a group message (``HOSTILE``), and the reason names it
(``samples[1].``, ``verdicts[1].``). The rollout and verifier are real
``rlvr-actor --role`` processes (the rollout with the torch-free ``trivial``
engine); the learner's path is in test_poison_learner.py.

The catalogue (``task_poisons``, ``sample_poisons``, ``scored_poisons``) covers:
not msgpack, wrong tag, future version, empty, deeply nested, max_payload - 1
bytes; NaN/inf in every float field; negative and out-of-range ids;
mismatched lengths; huge n and max_tokens; the same id with other content.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, NamedTuple

import anyio
import msgspec
import nats
import pytest

from rlvr.actors.config import NatsConfig
from rlvr.cli.natsserver import NatsServer
from rlvr.cli.commands.status import collect_status, dead_letter_summary, format_status
from rlvr.protocol import ChatMessage, Completion, DeadLetter, Heartbeat, encode
from rlvr.protocol.codec import Message
from tests.busclient import BusClient
from tests.conftest import ActorProcs, write_config
from tests.factories import make_group, make_scored_group, make_task

_SENTINEL = "SENTINEL"  # fixstr 0xa8 + 8 bytes on the wire


class Poison(NamedTuple):
    name: str
    data: bytes
    kind: str  # the expected dead_letter.<kind>
    reason: str  # a part of the expected reason
    msg_id: bool = True  # published with a Nats-Msg-Id (the max_payload case cannot afford headers)
    first: bytes | None = None  # a valid first copy under the same id (the conflict case)


def _nested(msg: Message, depth: int) -> bytes:
    """``msg`` with its verifier params nested ``depth`` arrays deep (built on the wire: encoding it would recurse)."""
    data = encode(msg)
    assert data.count(b"\xa8" + _SENTINEL.encode()) == 1
    return data.replace(b"\xa8" + _SENTINEL.encode(), b"\x91" * depth + b"\xc0")


def _deep(depth: int) -> Any:
    x: Any = 0
    for _ in range(depth):
        x = [x]
    return x


def generic_poisons(good: Message, other: Message, sentinel: Message, variant: Message, max_payload: int) -> list[Poison]:
    return [
        Poison("not_msgpack", b"\xc1\xc1 definitely not msgpack", "malformed", "msgpack"),
        Poison("empty", b"", "malformed", "msgpack"),
        Poison("wrong_tag", encode(other), "schema", "$.type"),
        Poison("future_version", encode(msgspec.structs.replace(good, v=2)), "version", "newer than the supported v1"),
        Poison("deeply_nested", _nested(sentinel, 200_000), "malformed", "nested too deeply"),
        Poison("nested_params", _nested(sentinel, 40), "invalid", "nests deeper than"),
        Poison("max_payload_minus_1", b"\xc1" * (max_payload - 1), "malformed", "msgpack", msg_id=False),
        Poison("same_id_other_content", encode(variant), "conflict", "already received with other content",
               first=encode(good)),
    ]


def _r(msg, **fields):
    return msgspec.structs.replace(msg, **fields)


def task_poisons(run: str, k: int, max_payload: int) -> list[Poison]:
    t = make_task(run, k=k, n=2)
    s = t.sampling
    bad = [
        ("n_huge", _r(t, n=10**6), "invalid", "n must be in"),
        ("n_zero", _r(t, n=0), "schema", "$.n"),
        ("max_tokens_huge", _r(t, sampling=_r(s, max_tokens=10**9)), "invalid", "sampling.max_tokens"),
        ("max_tokens_zero", _r(t, sampling=_r(s, max_tokens=0)), "schema", "$.sampling.max_tokens"),
        ("temperature_nan", _r(t, sampling=_r(s, temperature=math.nan)), "schema", "$.sampling.temperature"),
        ("temperature_inf", _r(t, sampling=_r(s, temperature=math.inf)), "invalid", "sampling.temperature must be finite"),
        ("top_p_nan", _r(t, sampling=_r(s, top_p=math.nan)), "schema", "$.sampling.top_p"),
        ("top_k_negative", _r(t, sampling=_r(s, top_k=-5)), "invalid", "sampling.top_k"),
        ("seed_negative", _r(t, sampling=_r(s, seed=-1)), "invalid", "sampling.seed"),
        ("stop_too_many", _r(t, sampling=_r(s, stop=tuple(f"s{i}" for i in range(33)))), "invalid", "sampling.stop"),
        ("created_at_nan", _r(t, created_at=math.nan), "invalid", "created_at must be finite"),
        ("created_at_inf", _r(t, created_at=math.inf), "invalid", "created_at must be finite"),
        ("created_at_neg_inf", _r(t, created_at=-math.inf), "invalid", "created_at must be finite"),
        ("chat_too_long", _r(t, prompt=[ChatMessage("user", "1+1=")] * 257), "invalid", "prompt has 257"),
        ("tests_too_many", _r(t, verifier=_r(t.verifier, params={"gold": "5", "tests": [0] * 1001})), "invalid",
         "params.tests has 1001"),
        ("empty_task_id", _r(t, task_id=""), "invalid", "task_id must not be empty"),
        ("index_negative", _r(t, index=-1), "schema", "$.index"),
    ]
    sentinel = _r(t, verifier=_r(t.verifier, params={"gold": "5", "deep": _SENTINEL}))
    other = make_group(run, k=k)
    variant = _r(t, prompt="9+9=")
    return generic_poisons(t, other, sentinel, variant, max_payload) + [
        Poison(name, encode(msg), kind, reason) for name, msg, kind, reason in bad
    ]


def sample_mutations(s) -> list[tuple[str, Any, str, str]]:
    """(name, poisoned sample, kind, reason): every float, id, length and count of a Sample."""
    t, sp = s.timings, s.sampling
    out = []
    for name, lp in (("nan", math.nan), ("inf", math.inf), ("neg_inf", -math.inf), ("positive", 0.5)):
        # Ranges per token are the schema's (the decoder checks them), named by field.
        out.append((f"logprob_{name}", _r(s, completion=Completion([5, 6], [-0.1, lp])), "schema",
                    "completion.logprobs[1]"))
    for field in ("queued_s", "generate_s", "finished_at"):
        for name, x in (("nan", math.nan), ("inf", math.inf)):
            out.append((f"timings_{field}_{name}", _r(s, timings=_r(t, **{field: x})), "invalid", f"timings.{field}"))
    return out + [
        ("lengths_disagree", _r(s, completion=Completion([5, 6, 7], [-0.1, -0.2])), "invalid",
         "completion.logprobs has 2 entries for 3 completion.ids"),
        ("completion_id_negative", _r(s, completion=Completion([5, -6], [-0.1, -0.2])), "schema", "completion.ids[1]"),
        ("prompt_id_negative", _r(s, prompt_ids=[1, -2, 3]), "schema", "prompt_ids[1]"),
        ("completion_id_huge", _r(s, completion=Completion([5, 2**40], [-0.1, -0.2])), "schema", "completion.ids[1]"),
        ("sample_index_past_n", _r(s, sample_index=9), "invalid", "sample_index must be in"),
        ("sample_index_negative", _r(s, sample_index=-1), "schema", "sample_index"),
        ("group_size_huge", _r(s, group_size=10**6), "invalid", "group_size must be in"),
        ("group_size_zero", _r(s, group_size=0), "schema", "group_size"),
        ("version_max_below_min", _r(s, policy_version=3, policy_version_max=1), "invalid", "policy_version_max"),
        ("temperature_nan", _r(s, sampling=_r(sp, temperature=math.nan)), "schema", "sampling.temperature"),
        ("top_p_inf", _r(s, sampling=_r(sp, top_p=math.inf)), "schema", "sampling.top_p"),
        ("longer_than_max_tokens", _r(s, sampling=_r(sp, max_tokens=1)), "invalid",
         "completion has 2 tokens, more than sampling.max_tokens"),
        ("empty_group_id", _r(s, group_id=""), "invalid", "group_id must not be empty"),
    ]


HOSTILE = 1  # the index of the poisoned member in a group message: not the first, so its index is named


def _member(group, i: int, sample):
    """``group`` (a SampleGroup or ScoredGroup) with ``samples[i]`` replaced."""
    return _r(group, samples=[sample if j == i else s for j, s in enumerate(group.samples)])


def _member_reason(name: str, reason: str, n: int) -> str:
    """Where a poisoned member's reason is named: ``samples[i].<field>``, or, for what makes it no member of
    its group's order (``protocol/validate.py``: a group message is complete and in order), ``samples[i]``
    and the rule."""
    order = {"sample_index_past_n": f"has sample_index 9 and group_size {n}",
             "group_size_huge": f"has sample_index {HOSTILE} and group_size 1000000",
             "empty_group_id": "is of run"}
    return f"samples[{HOSTILE}] {order[name]}" if name in order else f"samples[{HOSTILE}].{reason}"


def sample_poisons(run: str, k: int, max_payload: int) -> list[Poison]:
    """Group messages of 4 samples as ROLLOUTS carries them, each with one hostile member (``HOSTILE``)."""
    g = make_group(run, k=k, n=4)
    s = g.samples[HOSTILE]
    sentinel = _member(g, HOSTILE, _r(s, verifier=_r(s.verifier, params={"gold": "5", "deep": _SENTINEL})))
    # Another completion for the same slot is a regeneration (served once, counted as a
    # duplicate); another answer key for the same task is a conflict.
    variant = make_group(run, k=k, n=4, gold="6")
    return generic_poisons(g, make_task(run, k=k), sentinel, variant, max_payload) + [
        Poison(name, encode(_member(g, HOSTILE, bad)), kind, _member_reason(name, reason, 4))
        for name, bad, kind, reason in sample_mutations(s)
    ]


# --- the roles under test ------------------------------------------------------------------

BUS = {"ack_wait_s": 10.0, "nak_delay_s": 0.1, "heartbeat_every_s": 0.3, "drain_timeout_s": 1.0, "fetch_timeout_s": 0.3}


def _max_payload(url: str) -> int:
    async def go() -> int:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            return nc.max_payload
        finally:
            await nc.close()

    return anyio.run(go)


def init_topology(procs: ActorProcs, config, run: str, url: str) -> None:
    """Create the run's topology as the learner (or ``rlvr-actor init``) would."""
    if hasattr(procs, "init"):
        procs.init(config)
        return
    from rlvr.actors.bus import Bus
    from rlvr.actors.config import BusConfig
    from rlvr.protocol import RunNames

    async def go() -> None:
        bus = await Bus.connect(NatsConfig(url=url), BusConfig(**BUS), RunNames(run), "init")
        await bus.ensure_topology()
        await bus.close()

    anyio.run(go)


class RoleUnderTest:
    def __init__(self, procs: ActorProcs, replica: str, bus: BusClient, subject: str) -> None:
        self.procs, self.replica, self.bus, self.subject = procs, replica, bus, subject
        self.expected: Counter[str] = Counter()
        self.acked = 0
        self.done: set[str] = set()  # cases this role has survived

    def survives_all(self, cases: list[Poison], good_of) -> None:
        """Every case of ``cases`` not survived yet (``good_of(case)``: the good
        message after it, and its id), so a summary test holds when run alone."""
        for case in cases:
            if case.name not in self.done:
                self.survives(case, *good_of(case))

    def survives(self, case: Poison, good: Message, good_id: str) -> DeadLetter:
        if case.first is not None:
            self.bus.publish(self.subject, case.first, msg_id=f"{case.name}-first")
            self.acked += 1
        self.bus.publish(self.subject, case.data, msg_id=case.name if case.msg_id else None)
        self.bus.publish(self.subject, good, msg_id=good_id)
        self.acked += 1
        self.expected[case.kind] += 1
        key = f"dead_letter.{case.kind}"

        def counted(hb: Heartbeat) -> bool:
            c = hb.counters
            return hb.replica == self.replica and c.get("acked", 0) >= self.acked and c.get(key, 0) >= self.expected[case.kind]

        self.bus.wait_heartbeat(counted, timeout_s=60)
        assert self.procs.procs[self.replica].poll() is None, "the role died"
        letters = self.bus.decoded("DEAD", DeadLetter)
        if case.msg_id:
            (letter,) = [d for d in letters if d.headers.get("Nats-Msg-Id") == case.name]
        else:
            (letter,) = [d for d in letters if d.size == len(case.data) and d.reference]
        assert letter.kind == case.kind and case.reason in letter.reason, (letter.kind, letter.reason)
        self.done.add(case.name)
        return letter


def _role(tmp_path_factory, server: NatsServer, role: str, run: str, section: dict, subject_of) -> Any:
    tmp = tmp_path_factory.mktemp(role)
    procs = ActorProcs(tmp, server.url)
    config = write_config(tmp / f"{role}.json", {"run": run, "bus": BUS, role: section})
    init_topology(procs, config, run, server.url)
    procs.start(role, config, f"{role}-0")
    bus = BusClient(server.url, run)
    bus.wait_heartbeat(lambda hb: hb.replica == f"{role}-0" and hb.state == "running", timeout_s=120)
    return procs, RoleUnderTest(procs, f"{role}-0", bus, subject_of(bus.names))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with NatsServer(tmp_path_factory.mktemp("nats")) as srv:
        yield srv


@pytest.fixture(scope="module")
def rollout(server, tmp_path_factory):
    section = {"engine": {"kind": "trivial", "accuracy": 0.5}, "max_inflight_tasks": 4, "in_progress_every_s": 0.5}
    procs, role = _role(tmp_path_factory, server, "rollout", "pr", section, lambda n: n.tasks)
    try:
        yield role
    finally:
        procs.stop_all()


@pytest.fixture(scope="module")
def verifier(server, tmp_path_factory):
    section = {"pool_size": 1, "warm_verifiers": [], "concurrency": 4}
    procs, role = _role(tmp_path_factory, server, "verify", "pv", section, lambda n: n.rollouts)
    try:
        yield role
    finally:
        procs.stop_all()


MAX_PAYLOAD = 8 * 1024 * 1024  # what NatsServer serves, as the shipped configs (issue 46); checked below
TASK_CASES = task_poisons("pr", 1, MAX_PAYLOAD)
SAMPLE_CASES = sample_poisons("pv", 1, MAX_PAYLOAD)


def test_the_server_has_the_max_payload_the_catalogue_assumes(server):
    assert _max_payload(server.url) == MAX_PAYLOAD


def _good_task(case: Poison) -> tuple[Message, str]:
    k = 100 + TASK_CASES.index(case)
    return make_task("pr", k=k, n=2), f"good-{k}"


def _good_group(case: Poison) -> tuple[Message, str]:
    k = 100 + SAMPLE_CASES.index(case)
    return make_group("pv", k=k, n=2), f"good-{k}"


@pytest.mark.parametrize("case", TASK_CASES, ids=[c.name for c in TASK_CASES])
def test_rollout_dead_letters_a_poison_task_counts_it_and_serves_the_next(rollout, case):
    rollout.survives(case, *_good_task(case))


@pytest.mark.parametrize("case", SAMPLE_CASES, ids=[c.name for c in SAMPLE_CASES])
def test_verifier_dead_letters_a_poison_group_counts_it_and_scores_the_next(verifier, case):
    verifier.survives(case, *_good_group(case))


def test_every_good_task_was_answered_and_status_shows_the_dead_letters(rollout, server):
    rollout.survives_all(TASK_CASES, _good_task)  # those the parametrised test has not run (run alone)
    samples = {s.task_id for s in rollout.bus.rollouts()}
    assert {f"pr-t{100 + i}" for i in range(len(TASK_CASES))} <= samples
    st = anyio.run(collect_status, "pr", NatsConfig(url=server.url), 1.0)
    replica = st.replica("rollout-0")
    summary = dead_letter_summary(replica.counters)
    for kind, n in rollout.expected.items():
        assert f"{kind}={n}" in summary
    assert summary in format_status(st)


def test_every_good_group_was_scored(verifier):
    verifier.survives_all(SAMPLE_CASES, _good_group)
    scored = {s.sample_id for s in verifier.bus.scored()}
    assert {f"pv-t{100 + i}/{j}" for i in range(len(SAMPLE_CASES)) for j in range(2)} <= scored


def scored_poisons(run: str, k: int, vocab: int, max_payload: int) -> list[Poison]:
    """Scored group messages of 2 as SCORED carries them: the sample poisons in a member (``HOSTILE``),
    plus its verdict's floats and the learner's vocabulary."""
    g = make_scored_group(run, k=k, rewards=[1.0, 0.0])
    s, v = g.samples[HOSTILE], g.verdicts[HOSTILE]

    def verdict(bad):
        return _r(g, verdicts=[bad if j == HOSTILE else x for j, x in enumerate(g.verdicts)])

    sentinel = _member(g, HOSTILE, _r(s, verifier=_r(s.verifier, params={"gold": "5", "deep": _SENTINEL})))
    bad = [(f"sample_{name}", _member(g, HOSTILE, m), kind, _member_reason(name, reason, 2))
           for name, m, kind, reason in sample_mutations(s)]
    at = f"verdicts[{HOSTILE}]"
    for name, x in (("nan", math.nan), ("inf", math.inf), ("neg_inf", -math.inf), ("huge", 1e300)):
        bad.append((f"reward_{name}", verdict(_r(v, reward=x)), "invalid", f"{at}.reward"))
    for name, x in (("nan", math.nan), ("inf", math.inf)):
        bad.append((f"component_{name}", verdict(_r(v, components={"accuracy": x})), "invalid",
                    f"{at}.components['accuracy']"))
    for name, x in (("nan", math.nan), ("negative", -1.0)):
        bad.append((f"latency_{name}", verdict(_r(v, latency_s=x)), "invalid", f"{at}.latency_s"))
    bad.append(("completion_id_out_of_vocab", _member(g, HOSTILE, _r(s, completion=Completion([5, vocab], [-0.1, -0.2]))),
                "invalid", f"samples[{HOSTILE}].completion.ids[1] = {vocab} is outside the learner's vocabulary"))
    bad.append(("prompt_id_out_of_vocab", _member(g, HOSTILE, _r(s, prompt_ids=[1, vocab + 7])), "invalid",
                f"samples[{HOSTILE}].prompt_ids[1] = {vocab + 7} is outside the learner's vocabulary"))
    variant = verdict(_r(v, reward=1.0))  # the same group scored otherwise
    return generic_poisons(g, make_group(run, k=k, n=2), sentinel, variant, max_payload) + [
        Poison(name, encode(msg), kind, reason) for name, msg, kind, reason in bad
    ]


def test_the_catalogue_has_at_least_60_poison_messages_across_the_subjects():
    from tests.actors.test_poison_learner import SCORED_CASES

    counts = {"tasks": len(TASK_CASES), "rollouts": len(SAMPLE_CASES), "scored": len(SCORED_CASES)}
    assert sum(counts.values()) >= 60 and min(counts.values()) >= 20, counts
    # every float field of the wire types is poisoned with NaN or inf somewhere
    names = {c.name for c in TASK_CASES + SAMPLE_CASES + SCORED_CASES}
    for needle in ("temperature", "top_p", "created_at", "logprob", "timings_queued_s", "timings_generate_s",
                   "timings_finished_at", "reward", "component", "latency"):
        assert any(needle in n for n in names), needle
