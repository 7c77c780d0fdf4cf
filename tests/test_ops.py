"""ops/: the deployment files parse, and the NATS configs are accepted by the real server.

- every YAML file (compose, Kubernetes, collector, Prometheus) parses;
- the Grafana dashboard is JSON with the panels the operators look for;
- every ``ops/nats/**/*.conf`` passes ``nats-server -c FILE -t`` (the
  server's own config test), and so does the NATS config inside the
  Kubernetes ConfigMap;
- ``auth-tls.conf`` + ``accounts.conf`` are rendered by ``ops/gen-secrets.sh``
  (certificates from openssl, a password per role) and then served: each
  role's user runs the actors' own start-up code over TLS (the learner's
  ``ensure_topology``, the others' ``check_topology`` and durable binding)
  and its traffic; the full permission matrix is
  ``tests/actors/test_auth_matrix.py``;
- compose and k8s run NATS with that config, TLS and per-role users by
  default, give each role only its own password, and compose publishes no
  port beyond loopback unless ``RLVR_BIND`` says so;
- the run configs inside the Kubernetes ConfigMap and ``ops/compose/run.toml``
  decode as valid Configs.

What it does not cover: nothing here runs Docker or a Kubernetes API server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

OPS = Path(__file__).resolve().parents[1] / "ops"
NATS_SERVER = Path(sys.executable).parent / "nats-server"

try:
    import yaml
except ImportError:  # the nats-server checks below still run
    yaml = None
needs_yaml = pytest.mark.skipif(yaml is None, reason="PyYAML is not installed: YAML files not parsed")


def _yaml_files() -> list[Path]:
    return sorted(p for p in OPS.rglob("*") if p.suffix in (".yml", ".yaml"))


def _conf_test(path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NATS_SERVER), "-c", str(path), "-t"],
        capture_output=True, text=True, timeout=30, env={**os.environ, **(env or {})},
    )


@needs_yaml
@pytest.mark.parametrize("path", _yaml_files(), ids=lambda p: str(p.relative_to(OPS)))
def test_yaml_file_parses(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs, f"{path} holds no YAML document"


@needs_yaml
def test_k8s_manifests_are_well_formed() -> None:
    seen = set()
    for path in sorted((OPS / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert {"apiVersion", "kind"} <= doc.keys(), path
            if doc["kind"] == "Kustomization":
                for res in doc["resources"]:
                    assert (OPS / "k8s" / res).exists(), f"kustomization lists missing {res}"
                continue
            assert doc["metadata"]["name"], path
            if doc["kind"] != "Namespace":
                assert doc["metadata"]["namespace"] == "rlvr", (path, doc["metadata"]["name"])
            if doc["kind"] in ("Deployment", "StatefulSet"):
                spec = doc["spec"]
                labels = spec["template"]["metadata"]["labels"]
                assert spec["selector"]["matchLabels"].items() <= labels.items(), (path, "selector")
            seen.add((doc["kind"], doc["metadata"]["name"]))
    assert {("StatefulSet", "nats"), ("StatefulSet", "rlvr-learner"), ("Deployment", "rlvr-rollout"),
            ("Deployment", "rlvr-verify"), ("HorizontalPodAutoscaler", "rlvr-verify"),
            ("ConfigMap", "rlvr-run")} <= seen


@needs_yaml
def test_k8s_kustomization_renders_with_kubectl() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize ops/k8s` not checked")
    out = subprocess.run([kubectl, "kustomize", str(OPS / "k8s")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(out.stdout)]
    assert kinds.count("StatefulSet") == 2 and "HorizontalPodAutoscaler" in kinds


@needs_yaml
def test_k8s_run_config_is_a_valid_run_config(tmp_path: Path) -> None:
    from rlvr.cli.run_config import load_config

    doc = yaml.safe_load((OPS / "k8s" / "config.yaml").read_text())
    path = tmp_path / "run.toml"
    path.write_text(doc["data"]["run.toml"])
    cfg = load_config(path)
    assert cfg.bus.replicas == 3  # the R3 cluster of nats.yaml
    assert cfg.nats.url == "tls://nats.rlvr:4222"
    verify = cfg.nats.for_role("verify")
    assert (verify.user, verify.password_file) == ("verify", "/run/secrets/rlvr/verify.password")
    # Each role pod mounts exactly its own password and the CA there, and no API token.
    for role, name in (("learn", "learner"), ("rollout", "rollout"), ("verify", "verify")):
        doc = next(d for d in yaml.safe_load_all((OPS / "k8s" / f"{name}.yaml").read_text())
                   if d["kind"] in ("Deployment", "StatefulSet"))
        pod = doc["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        (auth,) = [v for v in pod["volumes"] if v["name"] == "nats-auth"]
        assert {i["key"] for i in auth["secret"]["items"]} == {f"{role}.password", "ca.pem"}
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["nats-auth"] == "/run/secrets/rlvr"


@needs_yaml
def test_compose_file_has_every_service() -> None:
    compose = yaml.safe_load((OPS / "compose" / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"nats", "learner", "rollout", "verify", "otel-collector"} <= services.keys()
    assert services["nats"]["image"].startswith("nats:2.10")
    assert "-js" in services["nats"]["command"]
    # NATS with TLS and per-role users by default (gen-secrets.sh's files)...
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["nats"]["volumes"] if v.startswith("../")}
    assert mounts["/etc/nats/nats.conf"] == "../secrets/nats.conf" and "/etc/nats/accounts.conf" in mounts
    assert services["nats"]["env_file"] == "../secrets/nats.env"
    # ...each role with only its own password and the CA, dialling TLS...
    for role, name in (("learn", "learner"), ("rollout", "rollout"), ("verify", "verify"), ("ops", "status")):
        assert {s["target"] for s in services[name]["secrets"]} == {f"rlvr/{role}.password", "rlvr/ca.pem"}
        assert "tls://nats:4222" in services[name]["command"]
    assert set(compose["secrets"]) == {"learn_password", "rollout_password", "verify_password", "ops_password", "nats_ca"}
    # ...and no port published beyond loopback unless the user opts in (RLVR_BIND).
    for name, service in services.items():
        for port in service.get("ports", []):
            host = port.rsplit(":", 2)[0]
            assert host in ("127.0.0.1", "${RLVR_BIND:-127.0.0.1}"), (name, port)
    assert services["verify"]["deploy"]["replicas"] == 2
    assert services["verify"]["build"]["target"] == "verify"
    assert services["learner"]["build"]["target"] == "full"
    for role, name in (("learn", "learner"), ("rollout", "rollout"), ("verify", "verify")):
        assert services[name]["command"][:2] == ["--role", role]
    dockerfile = (OPS / "compose" / "Dockerfile").read_text()
    for needle in ("FROM python:3.11-slim", "AS verify", "AS full", '".[verify]"', '".[all]"', "bubblewrap"):
        assert needle in dockerfile.replace("${PYTHON_IMAGE}", "python:3.11-slim"), needle


@needs_yaml
def test_collector_config_has_otlp_http_batch_and_exporters() -> None:
    cfg = yaml.safe_load((OPS / "otel" / "collector.yaml").read_text())
    assert cfg["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    traces = cfg["service"]["pipelines"]["traces"]
    assert "batch" in traces["processors"]
    assert {"debug", "file"} <= set(traces["exporters"])
    for pipeline in cfg["service"]["pipelines"].values():
        for exporter in pipeline["exporters"]:
            assert exporter in cfg["exporters"] or exporter in cfg.get("connectors", {}), exporter


def test_grafana_dashboard_is_json_with_the_expected_panels() -> None:
    dash = json.loads((OPS / "grafana" / "dashboard.json").read_text())
    titles = " | ".join(p["title"] for p in dash["panels"]).lower()
    for word in ("reward", "pass@1", "staleness", "zero-variance", "verifier outcomes", "p99", "tokens/s", "queue"):
        assert word in titles, word
    for panel in dash["panels"]:
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
        assert panel["description"], panel["title"]
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def _plain_nats_confs() -> list[Path]:
    # auth-tls.conf (and the accounts.conf it includes) need certificates and
    # passwords: tested below with the files gen-secrets.sh makes.
    return sorted(p for p in (OPS / "nats").rglob("*.conf") if p.name not in ("auth-tls.conf", "accounts.conf"))


@pytest.mark.parametrize("path", _plain_nats_confs(), ids=lambda p: str(p.relative_to(OPS)))
def test_nats_conf_is_accepted_by_nats_server(path: Path) -> None:
    out = _conf_test(path)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_yaml
def test_nats_conf_in_k8s_configmap_is_accepted(tmp_path: Path) -> None:
    docs = list(yaml.safe_load_all((OPS / "k8s" / "nats.yaml").read_text()))
    conf = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["nats.conf"]
    secrets = _gen_secrets(tmp_path / "secrets", "gsm8k-dapo")
    (tmp_path / "auth").mkdir()
    (tmp_path / "auth" / "accounts.conf").write_bytes((secrets / "accounts.conf").read_bytes())
    assert "/etc/nats/auth/" in conf and 'include "auth/accounts.conf"' in conf
    path = tmp_path / "nats.conf"  # the Secret is mounted at auth/ beside it
    path.write_text(conf.replace("/etc/nats/auth/", f"{secrets}/"))
    # Only the variables the StatefulSet sets from the Secret: a password the accounts name but
    # the pod lacks would stop the server at start.
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    env_names = {e["name"] for c in sts["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])}
    given = {k: v for k, v in _env(secrets).items() if k in env_names}
    assert given.keys() == _env(secrets).keys(), f"nats.yaml does not set {set(_env(secrets)) - env_names}"
    out = _conf_test(path, {"POD_NAME": "nats-0", **given})
    assert out.returncode == 0, out.stdout + out.stderr
    assert 'RUN_gsm8k-dapo' in (tmp_path / "auth" / "accounts.conf").read_text()


def test_nats_conf_test_flag_rejects_a_bad_file(tmp_path: Path) -> None:
    # Guards the checks above: `-t` really validates (unknown keys fail).
    bad = tmp_path / "bad.conf"
    bad.write_text("listen: 127.0.0.1:4222\nno_such_option: 1\n")
    assert _conf_test(bad).returncode != 0


# --- auth-tls.conf + accounts.conf, rendered by gen-secrets.sh, then a live server ----


def _gen_secrets(out: Path, run: str = "demo") -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: gen-secrets.sh cannot make certificates")
    subprocess.run(["sh", str(OPS / "gen-secrets.sh"), "-r", run, "-o", str(out), "-c", str(out)],
                   check=True, capture_output=True, timeout=60)
    return out


def _env(secrets: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (secrets / "nats.env").read_text().split())


def test_compose_run_config_is_the_gpu_example_plus_the_role_logins() -> None:
    import msgspec

    from rlvr.actors.config import NatsConfig

    ours = msgspec.toml.decode((OPS / "compose" / "run.toml").read_bytes())
    example = msgspec.toml.decode((OPS.parent / "examples" / "gpu_qwen.toml").read_bytes())
    nats = msgspec.convert(ours.pop("nats"), NatsConfig)
    assert ours == example
    assert nats.url == "tls://nats:4222" and nats.for_role("learn").password_file == "/run/secrets/rlvr/learn.password"


def test_gen_secrets_makes_private_files_and_a_config_scoped_to_its_run(tmp_path: Path) -> None:
    secrets = _gen_secrets(tmp_path / "s", "my-run_2")
    for name in ("learn.password", "rollout.password", "verify.password", "ops.password", "nats.env",
                 "ca-key.pem", "server-key.pem"):
        assert (secrets / name).stat().st_mode & 0o077 == 0, name
    passwords = {(secrets / f"{r}.password").read_text().strip() for r in ("learn", "rollout", "verify", "ops")}
    assert len(passwords) == 4 and all(len(p) == 64 for p in passwords)
    accounts = (secrets / "accounts.conf").read_text()
    assert "rlvr.my-run_2.tasks" in accounts and "RLVR_my-run_2_SCORED" in accounts and "demo" not in accounts
    assert not any(p in accounts + (secrets / "nats.conf").read_text() for p in passwords)
    again = subprocess.run(["sh", str(OPS / "gen-secrets.sh"), "-o", str(secrets)], capture_output=True, text=True)
    assert again.returncode == 1 and "-f replaces them" in again.stderr  # never overwrites by accident
    bad = subprocess.run(["sh", str(OPS / "gen-secrets.sh"), "-r", "a.b", "-o", str(tmp_path / "x")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "run id 'a.b'" in bad.stderr


def test_auth_tls_conf_is_accepted_with_its_secrets_and_refused_without_them(tmp_path: Path) -> None:
    secrets = _gen_secrets(tmp_path / "s")
    conf = secrets / "nats.conf"
    assert _conf_test(conf, _env(secrets)).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_")}
    out = subprocess.run([str(NATS_SERVER), "-c", str(conf), "-t"], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode != 0


def test_the_shipped_users_run_each_role_s_start_up_and_traffic_over_tls(tmp_path: Path) -> None:
    from nats.js import api as js_api

    from rlvr.actors.bus import Bus
    from rlvr.actors.config import BusConfig, NatsConfig
    from rlvr.protocol import RunNames
    from tests.actors.natsauth import AuthServer

    with AuthServer(tmp_path, "demo") as server:

        async def bus(role: str) -> Bus:
            cfg = NatsConfig(**server.nats_section(request_timeout_s=3.0)).for_role(role)
            b = await Bus.connect(cfg, BusConfig(), RunNames("demo"), f"{role}-test")
            if role == "learn":
                await b.ensure_topology()  # the owner
            else:
                await b.check_topology(role)  # everyone else: look, never touch
            return b

        async def scenario() -> None:
            learn, rollout, verify = await bus("learn"), await bus("rollout"), await bus("verify")
            names = learn.names
            try:
                learn_sub = await learn.pull_subscription(learn.consumer_def("learn"))
                await learn.js.publish(names.tasks, b"task", headers={"Nats-Msg-Id": "t1"})
                store = await learn.js.object_store(names.weights_bucket)
                await store.put("v1/model.safetensors", b"w" * 300_000)  # several 128 KiB chunks
                await learn.js.publish(names.weights, b"announcement")
                await learn.kv_put("policy_version", b"1")

                # rollout: pull a task, in_progress + ack, publish a sample, read the weights
                tasks = await rollout.pull_subscription(rollout.consumer_def("rollout"))
                (task,) = await tasks.fetch(1, timeout=3)
                await task.in_progress()
                await task.ack_sync()
                await rollout.js.publish(names.rollouts, b"sample", headers={"Nats-Msg-Id": "t1/0"})
                watch = await rollout.js.subscribe(
                    names.weights, ordered_consumer=True, deliver_policy=js_api.DeliverPolicy.LAST_PER_SUBJECT
                )
                assert (await watch.next_msg(timeout=3)).data == b"announcement"
                blob = await (await rollout.js.object_store(names.weights_bucket)).get("v1/model.safetensors")
                assert len(blob.data) == 300_000

                # verify: pull the sample, publish the score
                samples = await verify.pull_subscription(verify.consumer_def("verify"))
                (sample,) = await samples.fetch(1, timeout=3)
                assert sample.data == b"sample"
                await sample.ack_sync()
                await verify.js.publish(names.scored, b"scored", headers={"Nats-Msg-Id": "t1/0"})

                (scored,) = await learn_sub.fetch(1, timeout=3)
                assert scored.data == b"scored"
                await scored.ack_sync()
                await _large_group(names, learn, rollout, verify, samples, learn_sub)
            finally:
                for b in (learn, rollout, verify):
                    await b.close()

        anyio.run(scenario)
        # `status` as the read-only ops user sees the run's streams, consumers and version.
        from rlvr.cli.commands.status import collect_status

        st = anyio.run(collect_status, "demo", NatsConfig(**server.nats_section()), 0.2)
        assert st.policy_version == 1 and st.streams["SCORED"].messages == 2
        assert st.consumers["verify"].ack_pending == 0


async def _large_group(names, learn, rollout, verify, rollouts_sub, scored_sub) -> None:
    """A group too large for one message (issue 46), each role as its own user with its real code: the
    rollout stores its body and publishes the reference, the verifier reads it and publishes its
    ScoredGroup with the same reference, the learner reads it and deletes the body."""
    from rlvr.actors.bodies import delete_bodies, publish_group, resolve
    from rlvr.protocol import SampleGroup, ScoredGroup, decode
    from tests.actors.bodies_helpers import long_group, scored, stored_bodies

    group = long_group("demo", "demo-big", [300_000, 300_000])  # ~6 MB: past half of 8 MB
    await publish_group(rollout, names.rollouts, group, group.msg_id)
    (msg,) = await rollouts_sub.fetch(1, timeout=3)
    sent = decode(msg.data, SampleGroup)
    assert sent.body is not None and await resolve(verify, sent) == group
    await publish_group(verify, names.scored, scored(group), "demo-big/scored", stored=sent.body)
    await msg.ack_sync()
    (out,) = await scored_sub.fetch(1, timeout=3)
    assert await resolve(learn, decode(out.data, ScoredGroup)) == scored(group)
    await out.ack_sync()
    assert await delete_bodies(learn, [sent.body.name]) == 1 and await stored_bodies(learn) == {}


@needs_yaml
def test_compose_verify_service_scales_with_docker_compose_up_scale() -> None:
    # `docker compose up --scale verify=N` needs a service that N containers can
    # share: no fixed container_name (one name, one container), no fixed host
    # port (a second container could not bind it), no fixed hostname or
    # --replica id (each replica's heartbeats and traces need their own: the
    # default id is <role>-<container hostname>-<pid>).
    compose = yaml.safe_load((OPS / "compose" / "docker-compose.yml").read_text())
    verify = compose["services"]["verify"]  # after the YAML merge of x-rlvr-common
    for key in ("container_name", "ports", "hostname"):
        assert key not in verify, key
    assert "--replica" not in verify["command"]
    # The same durable for every replica: they share the run config, nothing per container.
    assert "/etc/rlvr/run.toml" in verify["command"] and verify["command"][:2] == ["--role", "verify"]
    assert isinstance(verify["deploy"]["replicas"], int)  # the default; --scale overrides it
    assert "docker compose up -d --scale verify=" in (OPS / "compose" / "docker-compose.yml").read_text()
