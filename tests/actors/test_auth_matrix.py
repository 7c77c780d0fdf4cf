"""The shipped per-role NATS users, checked action by action against a live server.

nats-server runs ``ops/nats/auth-tls.conf`` + ``accounts.conf`` with secrets
made on the spot by ``ops/gen-secrets.sh`` (TLS included). The roles' real
start-up runs first: ``rlvr-actor init`` as the learner's user creates the
topology, then a verifier and a rollout process bind their durables as their
own users (heartbeats say "running"). Then each user tries each action of
the matrix; a refused action is one the server answers with a permissions
violation naming its subject. The observed matrix must equal ``EXPECTED``,
and ``bench/results/permission_matrix.md`` must show exactly that table
(``RLVR_WRITE_MATRIX=1`` rewrites it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio

from rlvr.protocol import Heartbeat, decode
from tests.actors.natsauth import ROLES, AuthServer, connect_as
from tests.conftest import REPO, ActorProcs, write_config

RUN = "pm"
OTHER = "other"
MATRIX_MD = REPO / "bench" / "results" / "permission_matrix.md"

S = f"RLVR_{RUN}_SCORED"
B = f"rlvr-{RUN}-bodies"
_SCORED_HIJACK = {  # a rollout's attempt to store forged rewards, and to wipe the replay log
    "name": S, "subjects": [f"rlvr.{RUN}.scored", f"rlvr.{RUN}.rollouts"], "max_msgs": 1,
    "subject_transform": {"src": f"rlvr.{RUN}.rollouts", "dest": f"rlvr.{RUN}.scored"},
}

# (action, kind, subject, payload): kind "pub" publishes (a request, for the JetStream API), "sub" subscribes.
ACTIONS: list[tuple[str, str, str, dict | None]] = [
    ("publish tasks", "pub", f"rlvr.{RUN}.tasks", None),
    ("publish rollouts", "pub", f"rlvr.{RUN}.rollouts", None),
    ("publish scored", "pub", f"rlvr.{RUN}.scored", None),
    ("publish weights announcements", "pub", f"rlvr.{RUN}.weights", None),
    ("publish control", "pub", f"rlvr.{RUN}.control", None),
    ("read heartbeats", "sub", f"rlvr.{RUN}.status.>", None),
    ("read the verifiers' heartbeats", "sub", f"rlvr.{RUN}.status.verify.>", None),
    ("read the verifiers' backlog (consumer info)", "pub", f"$JS.API.CONSUMER.INFO.RLVR_{RUN}_ROLLOUTS.verify", None),
    ("publish an autoscaler heartbeat", "pub", f"rlvr.{RUN}.status.autoscale.autoscale-verify", None),
    ("listen to scored directly (core subscribe)", "sub", f"rlvr.{RUN}.scored", None),
    ("read another user's replies (its inbox)", "sub", "_INBOX.{other}.>", None),
    ("create a new stream", "pub", f"$JS.API.STREAM.CREATE.RLVR_{RUN}_EVIL",
     {"name": f"RLVR_{RUN}_EVIL", "subjects": [f"rlvr.{RUN}.evil"]}),
    ("update SCORED (subject transform, max_msgs=1)", "pub", f"$JS.API.STREAM.UPDATE.{S}", _SCORED_HIJACK),
    ("purge SCORED", "pub", f"$JS.API.STREAM.PURGE.{S}", {}),
    ("create a consumer on SCORED", "pub", f"$JS.API.CONSUMER.CREATE.{S}.thief.rlvr.{RUN}.scored",
     {"stream_name": S, "config": {"name": "thief", "durable_name": "thief", "ack_policy": "explicit",
                                   "filter_subject": f"rlvr.{RUN}.scored"}}),
    ("pull from the verifiers' durable", "pub", f"$JS.API.CONSUMER.MSG.NEXT.RLVR_{RUN}_ROLLOUTS.verify",
     {"batch": 1, "no_wait": True}),
    ("pull from the rollouts' durable", "pub", f"$JS.API.CONSUMER.MSG.NEXT.RLVR_{RUN}_TASKS.rollout",
     {"batch": 1, "no_wait": True}),
    ("read the policy version (KV)", "pub",
     f"$JS.API.DIRECT.GET.KV_rlvr-{RUN}-state.$KV.rlvr-{RUN}-state.policy_version", None),
    ("read the learner's lease (KV)", "pub",
     f"$JS.API.DIRECT.GET.KV_rlvr-{RUN}-state.$KV.rlvr-{RUN}-state.learner-lease", None),
    ("read the stored run config (KV)", "pub", f"$JS.API.DIRECT.GET.KV_rlvr-{RUN}-state.$KV.rlvr-{RUN}-state.config", None),
    ("read any KV message by sequence", "pub", f"$JS.API.STREAM.MSG.GET.KV_rlvr-{RUN}-state", {"seq": 1}),
    ("write the KV (policy version)", "pub", f"$KV.rlvr-{RUN}-state.policy_version", None),
    ("delete another role's durable", "pub", f"$JS.API.CONSUMER.DELETE.RLVR_{RUN}_ROLLOUTS.verify", None),
    ("delete a stream (DEAD)", "pub", f"$JS.API.STREAM.DELETE.RLVR_{RUN}_DEAD", None),
    ("another run: publish its tasks", "pub", f"rlvr.{OTHER}.tasks", None),
    ("another run: subscribe to its subjects", "sub", f"rlvr.{OTHER}.>", None),
    ("another run: stream info", "pub", f"$JS.API.STREAM.INFO.RLVR_{OTHER}_SCORED", None),
    ("list every stream with its config", "pub", "$JS.API.STREAM.LIST", {}),
    # the bodies of groups too large for one message (actors/bodies.py): the rollout writes, verify and
    # learn read, learn deletes
    ("write a group's body (a chunk)", "pub", f"$O.{B}.C.matrix", None),
    ("write a body's meta (or mark it deleted)", "pub", f"$O.{B}.M.bWF0cml4", None),
    ("look a body up (its meta)", "pub", f"$JS.API.STREAM.MSG.GET.OBJ_{B}", {"last_by_subj": f"$O.{B}.M.bWF0cml4"}),
    ("read a body's chunks (a consumer on the bodies bucket)", "pub", f"$JS.API.CONSUMER.CREATE.OBJ_{B}",
     {"stream_name": f"OBJ_{B}", "config": {"ack_policy": "none", "deliver_policy": "all",
                                           "filter_subject": f"$O.{B}.C.>"}}),
    ("purge the bodies bucket", "pub", f"$JS.API.STREAM.PURGE.OBJ_{B}", {}),
]

_LEARN_ONLY = {"publish tasks", "publish weights announcements", "publish control", "update SCORED (subject transform, max_msgs=1)",
               "purge SCORED", "create a consumer on SCORED", "read the stored run config (KV)",
               "read any KV message by sequence", "write the KV (policy version)", "delete another role's durable",
               "delete a stream (DEAD)", "purge the bodies bucket"}
EXPECTED: dict[str, set[str]] = {  # action -> the roles allowed to do it; every other role is refused
    **{name: set() for name, *_ in ACTIONS},
    **{name: {"learn"} for name in _LEARN_ONLY},
    "publish rollouts": {"rollout"},
    "publish scored": {"verify"},
    "read heartbeats": {"learn", "ops"},
    "read the verifiers' heartbeats": {"learn", "ops", "autoscale"},
    "read the verifiers' backlog (consumer info)": {"learn", "verify", "ops", "autoscale"},
    "publish an autoscaler heartbeat": {"autoscale"},
    "pull from the verifiers' durable": {"verify"},
    "pull from the rollouts' durable": {"rollout"},
    "read the policy version (KV)": {"learn", "ops"},
    "read the learner's lease (KV)": {"learn", "ops"},
    "write a group's body (a chunk)": {"rollout"},
    "write a body's meta (or mark it deleted)": {"rollout", "learn"},
    "look a body up (its meta)": {"rollout", "verify", "learn"},
    "read a body's chunks (a consumer on the bodies bucket)": {"verify", "learn"},
}


class _Violations:
    """Permissions violations the server reported to one connection (nats-py's error_cb)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.changed = anyio.Event()

    async def on_error(self, e: Exception) -> None:
        self.seen.append(str(e).lower())
        self.changed.set()

    def about(self, subject: str) -> bool:
        return any(subject.lower() in e and "permissions violation" in e for e in self.seen)


async def _try(nc, violations: _Violations, kind: str, subject: str, payload: dict | None) -> bool:
    """True when the server accepted the action, False when it refused it.

    Both outcomes are events, waited for under a deadline: a refusal is a
    permissions violation naming ``subject``; an accepted publish gets an
    answer on its reply subject (the API's response, JetStream's ack, or the
    server's "no responders" status for a plain subject). An accepted
    subscription has no answer: two round trips without a violation stand
    for it (the server reports a refused SUB before the PONG that follows).
    """
    if kind == "sub":
        await nc.subscribe(subject)
        await nc.flush(timeout=5)
        await nc.flush(timeout=5)
        return not violations.about(subject)
    inbox = nc.new_inbox()
    replies = await nc.subscribe(inbox, max_msgs=1)
    data = json.dumps(payload).encode() if payload is not None else b"x"
    await nc.publish(subject, data, reply=inbox, headers={"Nats-Msg-Id": f"matrix-{inbox}"})
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            answered = False

            async def answer() -> None:
                nonlocal answered
                async for _ in replies.messages:
                    answered = True
                    break
                tg.cancel_scope.cancel()

            async def refused() -> None:
                while not violations.about(subject):
                    violations.changed = anyio.Event()
                    await violations.changed.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(answer)
            tg.start_soon(refused)
    return answered and not violations.about(subject)


async def _matrix(server: AuthServer) -> dict[str, set[str]]:
    allowed: dict[str, set[str]] = {name: set() for name, *_ in ACTIONS}
    # learn last: what it may do includes deleting what the others' attempts target.
    for role in ("ops", "autoscale", "verify", "rollout", "learn"):
        violations = _Violations()
        nc = await connect_as(server, role, error_cb=violations.on_error)
        try:
            other = "verify" if role == "learn" else "learn"
            for name, kind, subject, payload in ACTIONS:
                if await _try(nc, violations, kind, subject.format(other=other), payload):
                    allowed[name].add(role)
        finally:
            await nc.close()
    return allowed


def _markdown(allowed: dict[str, set[str]]) -> str:
    lines = [
        "# Permission matrix: the shipped per-role NATS users",
        "",
        "Each role connects as its own user (`ops/nats/accounts.conf`, secrets from `ops/gen-secrets.sh`).",
        "Checked against a live nats-server by `tests/actors/test_auth_matrix.py`, after the roles' real",
        "start-up (`rlvr-actor init` as `learn`, then a verifier and a rollout binding their durables):",
        "`allowed` means the server accepted the action, `refused` that it answered with a permissions",
        "violation. `ops` is the read-only user of `rlvr-actor status`; `autoscale` reads the verifiers'",
        "backlog and heartbeats and publishes its own (`rlvr-actor autoscale`, `up` with `[autoscale]`).",
        "",
        "| action | " + " | ".join(ROLES) + " |",
        "| --- | " + " | ".join("---" for _ in ROLES) + " |",
    ]
    for name, *_ in ACTIONS:
        lines.append(f"| {name} | " + " | ".join("allowed" if r in allowed[name] else "refused" for r in ROLES) + " |")
    lines += [
        "",
        "The learner's own work (tasks, weights, the topology, its durable on SCORED, the KV and the object",
        "store) and each role's traffic (rollouts pulling tasks and reading weights, verifiers pulling",
        "rollouts and publishing scored) all run as these users in `tests/actors/test_secrets_run.py`; a",
        "group too large for one message (its body written by the rollout, read by the verifier and the",
        "learner, deleted by the learner) in `tests/test_ops.py`.",
        "",
    ]
    return "\n".join(lines)


def test_each_role_is_refused_every_action_outside_its_own(tmp_path):
    with AuthServer(tmp_path / "nats", RUN) as server:
        cfg = write_config(tmp_path / "run.json", {
            "run": RUN, "nats": server.nats_section(), "bus": {"heartbeat_every_s": 0.5},
            "rollout": {"engine": {"kind": "trivial"}},
            "verify": {"pool_size": 1, "warm_verifiers": [], "concurrency": 1},
        })
        procs = ActorProcs(tmp_path, server.url)
        try:
            procs.init(cfg)  # as the learner's user
            for role in ("verify", "rollout"):
                procs.start(role, cfg, f"{role}-0")

            async def both_running() -> None:
                running: set[str] = set()
                nc = await connect_as(server, "ops")
                try:
                    sub = await nc.subscribe(f"rlvr.{RUN}.status.>")
                    with anyio.fail_after(90):
                        async for msg in sub.messages:
                            hb = decode(msg.data, Heartbeat)
                            if hb.state == "running":
                                running.add(hb.role)
                            if running >= {"verify", "rollout"}:
                                return
                finally:
                    await nc.close()

            anyio.run(both_running)
            allowed = anyio.run(_matrix, server)
            for replica in ("verify-0", "rollout-0"):
                assert "permissions violation" not in procs.log_text(replica).lower()
        finally:
            procs.stop_all()
    assert allowed == EXPECTED
    text = _markdown(allowed)
    if os.environ.get("RLVR_WRITE_MATRIX") == "1":
        MATRIX_MD.write_text(text)
    assert Path(MATRIX_MD).read_text() == text
