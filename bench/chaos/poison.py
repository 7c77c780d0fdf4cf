"""Poison as faults: bad messages on every consumed subject of a running skeleton.

The catalogue of tasks, sample groups and scored groups is the one the poison
tests use (tests/actors/test_poison.py; ROLLOUTS and SCORED carry one message
per task's group, a poisoned sample or verdict is one member of it, and its
reason names the member): not msgpack, wrong tag, future
version, empty, deeply nested, ``max_payload`` - 1 bytes, NaN/inf in every
float field, negative and out-of-range ids, mismatched lengths, huge ``n``
and ``max_tokens``, the same id with other content. Here each is published
into a live run with a unique ``Nats-Msg-Id`` (``chaos-<subject>-<case>``),
and the runner then requires a dead letter with the expected kind and reason
and the consuming role still running and heartbeating.

Weights announcements are read by each rollout through an ordered consumer,
not a durable one, so they are never dead-lettered: a bad one must be logged
and skipped, and the rollout must keep serving (and survive a restart, since
WEIGHTS keeps the last announcement). The ``weights_poisons`` are those.

Deliberately left out: the out-of-vocabulary cases on SCORED, which only a
learner with an engine (a vocabulary) can refuse; the dry learner of the
skeleton has none.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import msgspec

from bench.chaos.scenario import INJECTED_K
from rlvr.protocol import SampleGroup, ScoredGroup, Verdict, WeightFile, WeightsAnnouncement, encode
from rlvr.protocol.groups import scored_group_msg_id
from tests.actors.test_poison import Poison, sample_poisons, scored_poisons, task_poisons
from tests.factories import make_task


class Injected(NamedTuple):
    subject: str  # tasks | rollouts | scored | weights
    case: Poison
    msg_id: str | None


def catalogue(run: str, max_payload: int) -> dict[str, list[Poison]]:
    k = INJECTED_K
    scored = [c for c in scored_poisons(run, k + 2, 64, max_payload) if "out_of_vocab" not in c.name]
    return {
        "tasks": task_poisons(run, k, max_payload),
        "rollouts": sample_poisons(run, k + 1, max_payload),
        "scored": scored,
        "weights": weights_poisons(run, max_payload),
    }


def _ann(run: str, **kw) -> WeightsAnnouncement:
    base = dict(run=run, version=10**6, step=1, transport="object_store", location=f"rlvr-{run}-weights",
                files=[WeightFile("v1000000/model.safetensors", "0" * 64, 10)], dtype="float32", bytes=10,
                created_at=1.0)
    return WeightsAnnouncement(**{**base, **kw})  # type: ignore[arg-type]


def weights_poisons(run: str, max_payload: int) -> list[Poison]:
    """Announcements a rollout must log and skip (kind/reason unused: no dead letter)."""
    good = _ann(run)
    cases = [
        ("not_msgpack", b"\xc1\xc1 not msgpack"),
        ("empty", b""),
        ("wrong_tag", encode(make_task(run, k=INJECTED_K + 3))),
        ("future_version", encode(msgspec.structs.replace(good, v=2))),
        ("max_payload_minus_1", b"\xc1" * (max_payload - 1)),
        ("missing_blob", encode(good)),
        ("path_traversal", encode(_ann(run, transport="path", location="/etc", version=10**6 + 1,
                                       files=[WeightFile("../../etc/passwd", "0" * 64, 10)]))),
        ("sha_mismatch_path", encode(_ann(run, transport="path", location="/tmp", version=10**6 + 2))),
        ("created_at_nan", encode(_ann(run, created_at=math.nan, version=10**6 + 3))),
        ("nccl_transport", encode(_ann(run, transport="nccl", version=10**6 + 4))),
        ("huge_file_list", encode(_ann(run, version=10**6 + 5,
                                       files=[WeightFile(f"v/f{i}", "0" * 64, 1) for i in range(5_000)]))),
    ]
    return [Poison(name, data, "", "", msg_id=name != "max_payload_minus_1") for name, data in cases]


def _conflict_ids(subject: str, case: Poison) -> list[str]:
    """Where a group's two copies land on two verifier replicas, neither replica sees the
    other's, so both are scored; each ScoredGroup goes out under ``scored_group_msg_id`` and the
    learner keeps the one SCORED stored first and dead-letters the other as a ``conflict``. Its
    dead letter carries that copy's id, either of the two, with the verdicts' digest after it
    (``inject`` matches on what precedes it, so any verdicts will do here)."""
    if subject != "rollouts" or case.first is None:
        return []
    groups = [msgspec.msgpack.decode(raw, type=SampleGroup) for raw in (case.first, case.data)]
    return [scored_group_msg_id(ScoredGroup(g.run, g.task_id, g.samples, [Verdict(0.0, "ok", "")] * len(g.samples)))
            .rpartition(".")[0] for g in groups]


def inject(sc, rng, subject: str, cases: list[Poison]) -> dict:
    """Publish ``cases`` on ``subject`` of a running scenario; require a dead letter with the
    expected kind and reason for each (weights: none) and the consumers still running."""
    import time

    obs, names = sc.obs, sc.obs.names
    subj = {"tasks": names.tasks, "rollouts": names.rollouts, "scored": names.scored, "weights": names.weights}[subject]
    consumers = {"tasks": ["rollout-0"], "rollouts": sc.verifiers, "scored": ["learn-0"], "weights": ["rollout-0"]}
    cases = list(cases)
    rng.shuffle(cases)
    t0 = time.monotonic()
    wanted: dict[str, Poison] = {}
    by_size: dict[int, Poison] = {}
    counted: list[str] = []
    for case in cases:
        mid = f"chaos-{sc.run}-{subject}-{case.name}" if case.msg_id else None
        if case.first is not None:
            obs.publish(subj, case.first, msg_id=f"{mid}-first")
        obs.publish(subj, case.data, msg_id=mid)
        if subject == "weights":
            continue
        if subject == "scored" and case.first is not None:
            # The same group with another verdict, published straight to SCORED: the learner keeps the
            # copy stored first and counts the other (`conflicting_copies`), acked, not dead-lettered: two
            # verifier replicas scoring one group differently is no poison (learner/custody/custody.py).
            # The end's custody check holds each sample to one settlement.
            counted.append(case.name)
            continue
        if mid:
            wanted[mid] = case
            sc.dead_expected[mid] = case.name
            for alt in _conflict_ids(subject, case):
                wanted[alt] = case
                sc.dead_expected[alt] = case.name
        else:
            by_size[len(case.data)] = case
            sc.dead_sizes.add(len(case.data))
    found: dict[str, str] = {}
    wrong: list[str] = []
    if subject != "weights":
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(found) < len(wanted) + len(by_size):
            for d in obs.dead_letters():
                mid = d.headers.get("Nats-Msg-Id", "")
                # A ScoredGroup's id ends ``.<verdicts digest>`` (``scored_group_msg_id``): matched on what
                # precedes it.
                case = (wanted.get(mid) or wanted.get(mid.rpartition(".")[0])
                        or (by_size.get(d.size) if not mid and d.reference else None))
                if case is None or case.name in found:
                    continue
                found[case.name] = d.kind
                if d.kind != case.kind or case.reason not in d.reason:
                    wrong.append(f"{case.name}: got {d.kind}: {d.reason[:150]}; expected {case.kind}: {case.reason}")
            time.sleep(0.5)
    missing = sorted({c.name for c in cases} - set(found) - set(counted)) if subject != "weights" else []
    survived = {r: sc.sk.roles[r].alive() and sc.obs.wait_heartbeat(r, after=time.monotonic(), timeout_s=20) is not None
                for r in consumers[subject]}
    restarted_ok = None
    if subject == "weights":
        # WEIGHTS keeps the last announcement: a rollout that restarts now reads a poison first.
        sc.sk.restart("rollout-0")
        restarted_ok = sc.wait_running("rollout-0", timeout_s=180)
        survived["rollout-0 restarted"] = restarted_ok
    for what in (f"{subject}: no dead letter for {missing}" if missing else "",
                 f"{subject}: wrong dead-letter reason: {wrong}" if wrong else "",
                 f"{subject}: a consumer died or hung after poison: {survived}" if not all(survived.values()) else ""):
        if what:
            sc.violations.append(what)
    return {"kind": f"poison:{subject}", "poison_messages": len(cases), "dead_lettered": len(found),
            "missing": missing, "wrong_reason": wrong, "survived": survived, "counted_not_dead_lettered": counted,
            "seconds": round(time.monotonic() - t0, 1)}
