"""The verifier role on a real nats-server: dead letters, shared work, redelivery, drain,
no code chosen by a message, and a topology it never rewrites.

Each test creates the topology first with ``rlvr-actor init`` (the learner's
job): a verifier only waits for it and binds its consumer.
"""

from __future__ import annotations

import signal
import time

from rlvr.protocol import DeadLetter, ScoredGroup, VerifierSpec, decode
from tests.busclient import BusClient
from tests.conftest import wait_for, write_config
from tests.factories import make_group

RUN = "vt"


GATE = "tests.verifier_fixtures:gate"


def _config(tmp_path, ack_wait_s: float = 3.0, name: str = "verify.json", bus: dict | None = None, **verify):
    return write_config(
        tmp_path / name,
        {
            "run": RUN,
            "bus": {"ack_wait_s": ack_wait_s, "nak_delay_s": 0.1, "heartbeat_every_s": 0.5, "drain_timeout_s": 4.0,
                    **(bus or {})},
            "verify": {"pool_size": 1, "warm_verifiers": [], "concurrency": 4, "plugins": [GATE], **verify},
        },
    )


def _start(actors, cfg, replica: str):
    """Init the topology (once per test) and start a verifier replica."""
    if not getattr(actors, "initialised", False):
        actors.init(cfg)
        actors.initialised = True
    return actors.start("verify", cfg, replica)


def _running(bus: BusClient, replica: str):
    return bus.wait_heartbeat(lambda hb: hb.replica == replica and hb.state == "running")


def test_malformed_and_wrong_schema_messages_are_dead_lettered_and_the_verifier_goes_on(actors, nats_server, tmp_path):
    bus = BusClient(nats_server.url, RUN)
    _start(actors, _config(tmp_path), "verify-0")
    _running(bus, "verify-0")
    bus.publish(bus.names.rollouts, b"\xc1 definitely not msgpack", msg_id="junk-1")
    bus.publish(bus.names.rollouts, b"\x81\xa4type\xa4task", msg_id="junk-2")  # {"type": "task"}
    bus.publish(bus.names.rollouts, make_group(RUN, k=1, verifier=VerifierSpec("no-such-verifier")), msg_id="bad-spec")
    bus.publish(bus.names.rollouts, make_group(RUN, k=2, text="5", gold="5"), msg_id="good")

    scored = wait_for(lambda: bus.scored(), what="the valid sample scored")
    assert [s.sample_id for s in scored] == [f"{RUN}-t2/0"] and scored[0].verdict.reward == 1.0
    dead = wait_for(lambda: (d := bus.decoded("DEAD", DeadLetter)) and len(d) == 3 and d, what="3 dead letters")
    reasons = {d.headers.get("Nats-Msg-Id"): d for d in dead}
    assert reasons["junk-1"].error_type == "MessageDecodeError:malformed" and "msgpack" in reasons["junk-1"].reason
    assert reasons["junk-2"].error_type == "MessageDecodeError:schema"
    assert reasons["bad-spec"].error_type == "VerifierSpecError" and "no-such-verifier" in reasons["bad-spec"].reason
    assert reasons["junk-1"].data == b"\xc1 definitely not msgpack"  # the raw bytes are kept
    assert actors.procs["verify-0"].poll() is None  # still running


def test_two_replicas_share_the_work_and_score_each_sample_once(actors, nats_server, tmp_path):
    bus = BusClient(nats_server.url, RUN)
    cfg = _config(tmp_path, concurrency=1)  # each replica holds one sample at a time
    gate = tmp_path / "both-replicas-busy"
    _start(actors, cfg, "verify-a")
    _start(actors, cfg, "verify-b")
    _running(bus, "verify-a")
    _running(bus, "verify-b")
    n = 40
    spec = VerifierSpec(GATE, {"path": str(gate), "gold": "1"})
    for k in range(n):
        bus.publish(bus.names.rollouts, make_group(RUN, k=k, text=str(k % 3), verifier=spec), msg_id=f"{RUN}-t{k}/group")
    # Both replicas provably hold work before any verification may finish.
    for replica in ("verify-a", "verify-b"):
        bus.wait_heartbeat(lambda hb, r=replica: hb.replica == r and hb.in_flight == 1)
    gate.touch()
    scored = wait_for(lambda: (s := bus.scored()) and len(s) >= n and s, what=f"{n} scored")
    ids = [s.sample_id for s in scored]
    assert len(ids) == len(set(ids)) == n
    assert {s.replica for s in scored} == {"verify-a", "verify-b"}
    assert bus.stream_count("ROLLOUTS") == 0  # work queue: every message acked once


def test_a_message_held_by_a_killed_replica_is_redelivered_and_scored_once(actors, nats_server, tmp_path):
    bus = BusClient(nats_server.url, RUN)
    cfg = _config(tmp_path)
    gate = tmp_path / "open-the-gate"
    _start(actors, cfg, "verify-a")
    _running(bus, "verify-a")
    spec = VerifierSpec(GATE, {"path": str(gate), "gold": "5"})
    bus.publish(bus.names.rollouts, make_group(RUN, k=7, text="5", verifier=spec), msg_id=f"{RUN}-t7/group")
    bus.wait_heartbeat(lambda hb: hb.replica == "verify-a" and hb.in_flight == 1)
    actors.kill("verify-a", signal.SIGKILL)
    actors.procs["verify-a"].wait()
    gate.touch()
    _start(actors, cfg, "verify-b")
    scored = wait_for(lambda: bus.decoded("SCORED", ScoredGroup), timeout_s=60, what="redelivered sample scored")
    assert len(scored) == 1 and scored[0].replica == "verify-b" and scored[0].verdicts[0].reward == 1.0
    info = wait_for(lambda: (c := bus.consumer("ROLLOUTS", "verify")) and c.num_ack_pending == 0 and c, what="acked")
    assert info.num_redelivered >= 0 and bus.stream_count("ROLLOUTS") == 0


def test_republished_scored_with_the_same_id_is_stored_once(nats_server, actors, tmp_path):
    bus = BusClient(nats_server.url, RUN)
    _start(actors, _config(tmp_path), "verify-0")
    _running(bus, "verify-0")
    from tests.factories import make_scored_group

    for _ in range(3):
        bus.publish(bus.names.scored, make_scored_group(RUN, k=1), msg_id=f"{RUN}-t1/group")
    assert bus.stream_count("SCORED") == 1


def test_sigterm_exits_0_quickly_and_naks_the_message_in_hand(actors, nats_server, tmp_path):
    bus = BusClient(nats_server.url, RUN)
    gate = tmp_path / "opened-after-the-stop"
    cfg = _config(tmp_path, ack_wait_s=120.0)  # a timeout-driven redelivery would take 2 minutes
    _start(actors, cfg, "verify-0")
    _running(bus, "verify-0")
    spec = VerifierSpec(GATE, {"path": str(gate), "gold": "5"})
    bus.publish(bus.names.rollouts, make_group(RUN, k=3, text="5", verifier=spec), msg_id=f"{RUN}-t3/group")
    bus.wait_heartbeat(lambda hb: hb.replica == "verify-0" and hb.in_flight == 1)
    t0 = time.monotonic()
    actors.kill("verify-0", signal.SIGTERM)
    assert actors.procs["verify-0"].wait(timeout=10) == 0
    assert time.monotonic() - t0 < 10
    # Nothing lost: still in ROLLOUTS, neither scored nor dead.
    assert bus.stream_count("ROLLOUTS") == 1
    assert bus.stream_count("SCORED") == 0 and bus.stream_count("DEAD") == 0
    # It was nak'ed, so another replica gets it now, well before ack_wait.
    gate.touch()
    _start(actors, cfg, "verify-1")
    scored = wait_for(lambda: bus.decoded("SCORED", ScoredGroup), timeout_s=60, what="the nak'ed sample scored")
    assert [s.replica for s in scored] == ["verify-1"]


PLANTED = """\
open({marker!r}, "w").close()
from rlvr.verify.simple import EXACT as V
"""


def test_a_message_naming_code_to_import_is_dead_lettered_the_replica_goes_on_and_nothing_is_imported(
    actors, nats_server, tmp_path
):
    # Regression (issue 13, item 1): `unittest.__main__:x` in a sample made the
    # verifier import it in its event loop (the replica exited with code 2),
    # and a .py file in the working directory was importable the same way.
    marker = tmp_path / "planted-module-was-imported"
    (tmp_path / "planted.py").write_text(PLANTED.format(marker=str(marker)))  # in the actor's cwd
    bus = BusClient(nats_server.url, RUN)
    _start(actors, _config(tmp_path), "verify-0")
    _running(bus, "verify-0")
    for k, name in enumerate(("unittest.__main__:x", "planted:V"), start=1):
        bus.publish(bus.names.rollouts, make_group(RUN, k=k, verifier=VerifierSpec(name, {"gold": "1"})), msg_id=name)
    bus.publish(bus.names.rollouts, make_group(RUN, k=3, text="5", gold="5"), msg_id="good")

    scored = wait_for(lambda: bus.scored(), what="the valid sample scored")
    assert [s.sample_id for s in scored] == [f"{RUN}-t3/0"]
    dead = wait_for(lambda: (d := bus.decoded("DEAD", DeadLetter)) and len(d) == 2 and d, what="2 dead letters")
    by_id = {d.headers.get("Nats-Msg-Id"): d for d in dead}
    for name in ("unittest.__main__:x", "planted:V"):
        assert by_id[name].error_type == "VerifierSpecError"
        assert f"unknown verifier {name!r}" in by_id[name].reason and "[verify] plugins" in by_id[name].reason
    assert actors.procs["verify-0"].poll() is None  # still running
    assert not marker.exists()  # the planted module was never imported


def test_a_plugin_module_lying_in_the_working_directory_is_not_importable(actors, nats_server, tmp_path):
    # `python -m` puts the working directory on sys.path; the CLI takes it off
    # first thing, so even a listed plug-in cannot come from there.
    marker = tmp_path / "cwd-plugin-was-imported"
    (tmp_path / "cwdplugin.py").write_text(PLANTED.format(marker=str(marker)))
    proc = actors.start("verify", _config(tmp_path, plugins=["cwdplugin:V"]), "verify-0")
    assert proc.wait(timeout=60) == 1
    assert "plug-in 'cwdplugin:V': cannot import 'cwdplugin'" in actors.log_text("verify-0")
    assert not marker.exists()


def test_a_listed_plugin_is_loaded_at_start_and_scores(actors, nats_server, tmp_path):
    bus = BusClient(nats_server.url, RUN)
    gate = tmp_path / "open"
    gate.touch()
    _start(actors, _config(tmp_path), "verify-0")
    _running(bus, "verify-0")
    assert "verifier_plugins_loaded" in actors.log_text("verify-0")
    bus.publish(bus.names.rollouts, make_group(RUN, k=1, text="5", verifier=VerifierSpec(GATE, {"path": str(gate), "gold": "5"})))
    scored = wait_for(lambda: bus.scored(), what="the plug-in's verdict")
    assert scored[0].verdict.reward == 1.0 and scored[0].verdict.verifier == GATE


def test_a_group_with_other_content_on_another_replica_reaches_the_learner_as_a_conflict(
        actors, nats_server, tmp_path):
    """A replica remembers only the copies it took. The same task's group published again with
    another gold, taken by a second replica, is scored too; its ScoredGroup goes out under another
    ``Nats-Msg-Id`` (``scored_group_msg_id``), so SCORED keeps both and the learner keeps one (the
    first stored: a group is complete the moment it arrives, and a group gone to a step stands) and
    dead-letters the other as a ``conflict``, instead of the server dropping one without a word."""
    bus = BusClient(nats_server.url, RUN)
    cfg = write_config(tmp_path / "run.json", {
        "run": RUN, "bus": {"ack_wait_s": 3.0, "heartbeat_every_s": 0.5, "drain_timeout_s": 4.0},
        "verify": {"pool_size": 1, "warm_verifiers": [], "concurrency": 4},
        "learn": {"group_size": 2, "groups_per_step": 1, "steps": 1000, "out_dir": str(tmp_path / "o"),
                  "lease_ttl_s": 2.0},
    })
    first, other = make_group(RUN, k=7, n=2, gold="5"), make_group(RUN, k=7, n=2, gold="6")
    assert first.msg_id == other.msg_id
    a = _start(actors, cfg, "verify-a")
    _running(bus, "verify-a")
    bus.publish(bus.names.rollouts, first, msg_id="copy-1")
    wait_for(lambda: bus.stream_count("SCORED") == 1, what="the first copy scored")
    actors.kill("verify-a", signal.SIGTERM)
    assert a.wait(timeout=60) == 0
    _start(actors, cfg, "verify-b")
    _running(bus, "verify-b")
    bus.publish(bus.names.rollouts, other, msg_id="copy-2")
    stored = wait_for(lambda: (m := bus.stream_messages("SCORED")) and len(m) == 2 and m, what="both copies stored")
    assert len({h["Nats-Msg-Id"] for _, _, h in stored}) == 2

    actors.start("learn", cfg, "learn-0")
    dead = wait_for(lambda: [d for d in bus.decoded("DEAD", DeadLetter) if d.stage == "learn"], what="a conflict")
    assert len(dead) == 1 and dead[0].error_type == "ConflictingDuplicate"
    assert "already received with other content" in dead[0].reason
    aside = max(stored, key=lambda m: m[0])  # the later copy
    assert dead[0].headers["Nats-Msg-Id"] == aside[2]["Nats-Msg-Id"]
    assert decode(aside[1], ScoredGroup).samples[0].verifier.params["gold"] == "6"
