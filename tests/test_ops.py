"""ops/: the deployment files parse, and the NATS configs are accepted by the real server.

- every YAML file (compose, Kubernetes, collector, Prometheus) parses;
- the Grafana dashboard is JSON with the panels the operators look for;
- every ``ops/nats/**/*.conf`` passes ``nats-server -c FILE -t`` (the
  server's own config test), and so does the NATS config inside the
  Kubernetes ConfigMap;
- ``auth-tls.conf`` is tested with certificates made on the spot by openssl,
  and then served: each role's user runs the actors' own start-up code
  (``Bus.connect``, ``ensure_topology``, its durable pull consumer) over TLS,
  and is refused the subjects of the other roles;
- the run config inside the Kubernetes ConfigMap decodes as a valid Config.

What it does not cover: nothing here runs Docker or a Kubernetes API server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

OPS = Path(__file__).resolve().parents[1] / "ops"
NATS_SERVER = Path(sys.executable).parent / "nats-server"
PASSWORDS = {
    "RLVR_LEARN_PASSWORD": "learn-secret",
    "RLVR_ROLLOUT_PASSWORD": "rollout-secret",
    "RLVR_VERIFY_PASSWORD": "verify-secret",
    "RLVR_OPS_PASSWORD": "ops-secret",
    "NATS_SYS_PASSWORD": "sys-secret",
}

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
    from rlvr.actors.config import load_config

    doc = yaml.safe_load((OPS / "k8s" / "config.yaml").read_text())
    path = tmp_path / "run.toml"
    path.write_text(doc["data"]["run.toml"])
    cfg = load_config(path)
    assert cfg.bus.replicas == 3  # the R3 cluster of nats.yaml
    assert cfg.nats.url == "nats://nats.rlvr:4222"


@needs_yaml
def test_compose_file_has_every_service() -> None:
    compose = yaml.safe_load((OPS / "compose" / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"nats", "learner", "rollout", "verify", "otel-collector"} <= services.keys()
    assert services["nats"]["image"].startswith("nats:2.10")
    assert "-js" in services["nats"]["command"]
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
    return sorted(p for p in (OPS / "nats").rglob("*.conf") if p.name != "auth-tls.conf")


@pytest.mark.parametrize("path", _plain_nats_confs(), ids=lambda p: str(p.relative_to(OPS)))
def test_nats_conf_is_accepted_by_nats_server(path: Path) -> None:
    out = _conf_test(path)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_yaml
def test_nats_conf_in_k8s_configmap_is_accepted(tmp_path: Path) -> None:
    docs = list(yaml.safe_load_all((OPS / "k8s" / "nats.yaml").read_text()))
    conf = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["nats.conf"]
    path = tmp_path / "nats.conf"
    path.write_text(conf)
    out = _conf_test(path, {"POD_NAME": "nats-0"})
    assert out.returncode == 0, out.stdout + out.stderr


def test_nats_conf_test_flag_rejects_a_bad_file(tmp_path: Path) -> None:
    # Guards the checks above: `-t` really validates (unknown keys fail).
    bad = tmp_path / "bad.conf"
    bad.write_text("listen: 127.0.0.1:4222\nno_such_option: 1\n")
    assert _conf_test(bad).returncode != 0


# --- auth-tls.conf: certificates from openssl, then a live server ------------------
EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")  # fast to generate


@pytest.fixture(scope="module")
def tls_conf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("tls")
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not installed: auth-tls.conf needs real certificate files to be checked")
    certs = tmp_path / "certs"
    certs.mkdir()

    def ssl(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=certs, check=True, capture_output=True, timeout=60)

    ssl("req", "-x509", *EC_KEY, "-nodes", "-days", "2", "-subj", "/CN=rlvr-test-ca",
        "-keyout", "ca-key.pem", "-out", "ca.pem")
    ssl("req", *EC_KEY, "-nodes", "-subj", "/CN=localhost",
        "-keyout", "server-key.pem", "-out", "server.csr")
    (certs / "san.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
        "-days", "2", "-extfile", "san.cnf", "-out", "server-cert.pem")
    text = (OPS / "nats" / "auth-tls.conf").read_text()
    assert "/etc/nats/certs/" in text and "store_dir: /data/nats" in text
    text = text.replace("/etc/nats/certs/", f"{certs}/").replace("store_dir: /data/nats", f"store_dir: {tmp_path / 'js'}")
    path = tmp_path / "auth-tls.conf"
    path.write_text(text)
    return path


def test_auth_tls_conf_is_accepted_with_real_certificates(tls_conf: Path) -> None:
    out = _conf_test(tls_conf, PASSWORDS)
    assert out.returncode == 0, out.stdout + out.stderr


def test_auth_tls_conf_refuses_to_load_without_its_passwords(tls_conf: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in PASSWORDS}
    out = subprocess.run([str(NATS_SERVER), "-c", str(tls_conf), "-t"], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode != 0


@pytest.fixture
def tls_server(tls_conf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log_path = tmp_path / "nats.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(NATS_SERVER), "-c", str(tls_conf), "-a", "127.0.0.1", "-p", "-1", "-m", "-1"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **PASSWORDS}, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 15
        while "Server is ready" not in (text := log_path.read_text(errors="replace")):
            assert proc.poll() is None, f"nats-server exited:\n{text}"
            assert time.monotonic() < deadline, f"nats-server not ready:\n{text}"
            time.sleep(0.02)
        port = int(re.search(r"client connections on [^:\s]+:(\d+)", text).group(1))
        # The roles trust the CA the way the README says: SSL_CERT_FILE.
        monkeypatch.setenv("SSL_CERT_FILE", str(tls_conf.parent / "certs" / "ca.pem"))
        yield port
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(10)


async def _bus(port: int, user: str):
    from rlvr.actors.bus import Bus
    from rlvr.actors.config import BusConfig, NatsConfig
    from rlvr.protocol import RunNames

    password = PASSWORDS[f"RLVR_{user.upper()}_PASSWORD"]
    nats_cfg = NatsConfig(url=f"tls://{user}:{password}@127.0.0.1:{port}", connect_timeout_s=5, request_timeout_s=3)
    bus = await Bus.connect(nats_cfg, BusConfig(), RunNames("demo"), f"{user}-test")
    await bus.ensure_topology()  # every role runs this at start-up
    return bus


async def _refused(port: int, user: str, subject: str) -> str:
    """Publish on ``subject`` as ``user``; the server's permissions error, as text."""
    import nats

    errors: list[Exception] = []
    got = anyio.Event()

    async def on_error(e: Exception) -> None:
        errors.append(e)
        got.set()

    password = PASSWORDS[f"RLVR_{user.upper()}_PASSWORD"]
    nc = await nats.connect(f"tls://{user}:{password}@127.0.0.1:{port}", error_cb=on_error, max_reconnect_attempts=0)
    try:
        await nc.publish(subject, b"x")
        await nc.flush()
        with anyio.fail_after(5):
            await got.wait()
    finally:
        await nc.close()
    return str(errors[0]).lower()


def test_auth_tls_each_role_runs_its_startup_and_traffic_and_nothing_else(tls_server: int) -> None:
    from nats.js import api as js_api

    port = tls_server

    async def scenario() -> None:
        learn = await _bus(port, "learn")
        rollout = await _bus(port, "rollout")
        verify = await _bus(port, "verify")
        names = learn.names
        try:
            learn_sub = await learn.pull_subscription(learn.consumer_def("learn"))
            await learn.js.publish(names.tasks, b"task", headers={"Nats-Msg-Id": "t1"})
            store = await learn.js.object_store(names.weights_bucket)
            await store.put("v1/model.safetensors", b"w" * 300_000)  # several 128 KiB chunks
            await learn.js.publish(names.weights, b"announcement")

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
        finally:
            for bus in (learn, rollout, verify):
                await bus.close()

        # Each role is refused what belongs to another role.
        assert "permissions violation" in await _refused(port, "rollout", "rlvr.demo.scored")
        assert "permissions violation" in await _refused(port, "rollout", "rlvr.demo.tasks")
        assert "permissions violation" in await _refused(port, "verify", "rlvr.demo.tasks")
        assert "permissions violation" in await _refused(port, "verify", "$JS.API.CONSUMER.MSG.NEXT.RLVR_demo_TASKS.rollout")
        assert "permissions violation" in await _refused(port, "verify", "$JS.API.STREAM.DELETE.RLVR_demo_SCORED")
        assert "permissions violation" in await _refused(port, "ops", "rlvr.demo.tasks")

    anyio.run(scenario)
