"""ops/k8s, offline: every manifest against the Kubernetes and KEDA schemas, and the
KEDA ScaledObject's names against the code.

- every resource under ``ops/k8s`` (the KEDA component's included) validates
  against the Kubernetes JSON schemas that ``kubernetes-validate`` ships
  (strict: an unknown or misspelt field fails too), for the oldest and the
  newest Kubernetes version checked here; the ScaledObject validates against
  the ``openAPIV3Schema`` of KEDA's ScaledObject CRD, vendored in
  ``tests/data/keda/`` (made strict the same way, as ``kubectl apply
  --validate=strict`` would be);
- a broken manifest (a wrong field type, a misspelt field) fails each of those
  validations, so they are shown to bite;
- the scaler's account, stream and consumer are the ones the code and the run
  config name (``RunNames``, ``Bus.consumer_def``, ``RUN_<run>`` as
  ``gen-secrets.sh`` renders it), its endpoint is nats.yaml's headless Service
  and monitoring port, and a real nats-server running the rendered auth config
  answers KEDA's query (``/jsz?acc=...&consumers=true&config=true``) for
  them with the lag KEDA computes;
- the CPU HPA and the ScaledObject never both target ``rlvr-verify``: the base
  renders the HPA only, the base with ``components: [keda]`` the ScaledObject
  only (rendered with ``kubectl kustomize`` where kubectl is installed);
- the NetworkPolicy admits nothing from outside the namespace except KEDA's
  operator, and it only to the monitoring port.

What it does not cover: no Kubernetes API server, no KEDA, no cluster. Schema
validation does not run the API server's own checks beyond the schema (the
CRD's one CEL rule, minReplicaCount <= maxReplicaCount, is checked by hand).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

# All three come with the `test` extra (pyproject.toml).
yaml = pytest.importorskip("yaml", reason="PyYAML is not installed: manifests not validated")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed: manifests not validated")
kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed: no Kubernetes schemas to validate against"
)

from kubernetes_validate.utils import all_versions, latest_version  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OPS = REPO / "ops"
K8S = OPS / "k8s"
KEDA_DIR = K8S / "keda"
SCALED_OBJECT = KEDA_DIR / "verify-keda.yaml"
KEDA_CRD = Path(__file__).resolve().parent / "data" / "keda" / "keda.sh_scaledobjects.yaml"
KEDA_CRD_VERSION = "v2.20.2"  # the tag the vendored CRD was copied from (tests/data/keda/README.md)
# The oldest and the newest Kubernetes whose schemas kubernetes-validate ships
# (1.25 and 1.37 with kubernetes-validate 1.37.0).
K8S_VERSIONS = (all_versions()[0], latest_version())
KUSTOMIZE_KINDS = ("Kustomization", "Component")


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _manifests() -> list[tuple[Path, int, dict]]:
    out = []
    for path in sorted(K8S.rglob("*.yaml")):
        for i, doc in enumerate(_docs(path)):
            if doc["kind"] not in KUSTOMIZE_KINDS:
                out.append((path, i, doc))
    return out


def _id(item: tuple[Path, int, dict]) -> str:
    path, _, doc = item
    return f"{path.relative_to(K8S)}:{doc['kind']}/{doc['metadata']['name']}"


MANIFESTS = _manifests()
K8S_MANIFESTS = [m for m in MANIFESTS if not m[2]["apiVersion"].startswith("keda.sh/")]


def _scaled_object() -> dict:
    (doc,) = _docs(SCALED_OBJECT)
    return doc


def _trigger(so: dict) -> dict[str, str]:
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == "nats-jetstream"
    return trigger["metadata"]


# --- the Kubernetes schemas --------------------------------------------------


def _k8s_validate(doc: dict, version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("item", K8S_MANIFESTS, ids=_id)
def test_k8s_manifest_validates_against_the_kubernetes_schema(item: tuple[Path, int, dict], version: str) -> None:
    _k8s_validate(item[2], version)


def test_every_manifest_is_validated_by_one_of_the_two_schemas() -> None:
    # Nothing slips through as an unknown kind: all Kubernetes kinds, plus the ScaledObject.
    kinds = {doc["kind"] for _, _, doc in MANIFESTS}
    assert {"Deployment", "StatefulSet", "Service", "ConfigMap", "NetworkPolicy", "HorizontalPodAutoscaler",
            "ScaledObject"} <= kinds
    keda = [doc for _, _, doc in MANIFESTS if doc["apiVersion"].startswith("keda.sh/")]
    assert [d["kind"] for d in keda] == ["ScaledObject"]
    assert len(K8S_MANIFESTS) + len(keda) == len(MANIFESTS)


K8S_BREAKS = [
    ("verify.yaml Deployment: replicas a string",
     lambda docs: docs[0]["spec"].__setitem__("replicas", "two"), ["spec", "replicas"]),
    ("verify.yaml Deployment: a misspelt container field",
     lambda docs: docs[0]["spec"]["template"]["spec"]["containers"][0].__setitem__("imagePullPolice", "Always"),
     ["spec", "template", "spec", "containers", 0]),
    ("verify.yaml HPA: minReplicas a list",
     lambda docs: docs[1]["spec"].__setitem__("minReplicas", [2]), ["spec", "minReplicas"]),
]


@pytest.mark.parametrize("where, break_it, at", K8S_BREAKS, ids=[b[0] for b in K8S_BREAKS])
def test_kubernetes_validation_rejects_a_broken_manifest(where: str, break_it, at: list) -> None:
    docs = copy.deepcopy(_docs(K8S / "verify.yaml"))
    for doc in docs:
        _k8s_validate(doc, K8S_VERSIONS[0])  # whole, they pass
    break_it(docs)
    with pytest.raises(jsonschema.ValidationError) as err:
        for doc in docs:
            _k8s_validate(doc, K8S_VERSIONS[0])
    assert list(err.value.path) == at, err.value.message


# --- KEDA's ScaledObject CRD ---------------------------------------------------


def _strict(schema: object) -> object:
    """The CRD schema with unknown fields refused, as the API server's strict field validation does."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _keda_validator():
    (crd,) = _docs(KEDA_CRD)
    assert crd["kind"] == "CustomResourceDefinition" and crd["metadata"]["name"] == "scaledobjects.keda.sh"
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    assert version["served"] and version["storage"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _keda_validate(doc: dict) -> None:
    assert doc["apiVersion"] == "keda.sh/v1alpha1" and doc["kind"] == "ScaledObject"
    _keda_validator().validate(doc)
    # The CRD's x-kubernetes-validations rule (CEL), which a JSON schema cannot say.
    spec = doc["spec"]
    if spec.get("minReplicaCount", 0) > spec.get("maxReplicaCount", 100):
        raise jsonschema.ValidationError("minReplicaCount must be less than or equal to maxReplicaCount")
    # metadata is a plain object in the CRD; the API server checks it as ObjectMeta.
    _k8s_validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}, K8S_VERSIONS[0])


def test_scaled_object_validates_against_the_keda_crd() -> None:
    _keda_validate(_scaled_object())


def test_the_vendored_crd_is_the_one_its_readme_names() -> None:
    readme = (KEDA_CRD.parent / "README.md").read_text()
    assert KEDA_CRD_VERSION in readme and "Apache-2.0" in readme
    assert (KEDA_CRD.parent / "LICENSE").read_text().lstrip().startswith("Apache License")
    digest = hashlib.sha256(KEDA_CRD.read_bytes()).hexdigest()
    assert digest in readme, "the CRD file changed: re-copy it from the tag and update README.md"


KEDA_BREAKS = [
    # YAML reads 64 as an int; the CRD wants every trigger metadata value a string.
    ("lagThreshold an int", lambda so: _trigger(so).__setitem__("lagThreshold", 64),
     ["spec", "triggers", 0, "metadata", "lagThreshold"]),
    ("minReplicaCount a string", lambda so: so["spec"].__setitem__("minReplicaCount", "2"),
     ["spec", "minReplicaCount"]),
    ("pollingInterval 0", lambda so: so["spec"].__setitem__("pollingInterval", 0), ["spec", "pollingInterval"]),
    ("a misspelt spec field", lambda so: so["spec"].__setitem__("cooldownPeriods", 300), ["spec"]),
    ("a misspelt behavior field", lambda so: so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]
     ["behavior"]["scaleDown"].__setitem__("stabilisationWindowSeconds", 300),
     ["spec", "advanced", "horizontalPodAutoscalerConfig", "behavior", "scaleDown"]),
    ("no triggers", lambda so: so["spec"].__setitem__("triggers", []), ["spec", "triggers"]),
    ("min above max", lambda so: so["spec"].__setitem__("minReplicaCount", 40), []),  # the CEL rule
    ("a bad name", lambda so: so["metadata"].__setitem__("name", 7), ["metadata", "name"]),
]


@pytest.mark.parametrize("where, break_it, at", KEDA_BREAKS, ids=[b[0] for b in KEDA_BREAKS])
def test_keda_validation_rejects_a_broken_scaled_object(where: str, break_it, at: list) -> None:
    so = copy.deepcopy(_scaled_object())
    _keda_validate(so)  # whole, it passes
    break_it(so)
    with pytest.raises(jsonschema.ValidationError) as err:
        _keda_validate(so)
    assert list(err.value.path) == at, err.value.message


# --- the ScaledObject's names are the code's ----------------------------------


def _run_config() -> str:
    (doc,) = _docs(K8S / "config.yaml")
    return doc["data"]["run.toml"]


def _load_run_config(tmp_path: Path):
    from rlvr.cli.run_config import load_config

    path = tmp_path / "run.toml"
    path.write_text(_run_config())
    return load_config(path)


def test_scaled_object_names_the_run_s_account_stream_and_consumer(tmp_path: Path) -> None:
    from rlvr.actors.bus import Bus
    from rlvr.actors.config import BusConfig
    from rlvr.protocol.subjects import RunNames

    cfg = _load_run_config(tmp_path)
    run = cfg.run
    assert run == "gsm8k-dapo"
    meta = _trigger(_scaled_object())
    names = RunNames(run)
    assert meta["stream"] == names.stream("ROLLOUTS")
    # The durable every verifier binds to, as the bus builds it.
    cd = Bus.consumer_def(SimpleNamespace(names=names, cfg=BusConfig()), "verify")
    assert (meta["stream"], meta["consumer"]) == (cd.stream, cd.durable)
    # The account holding the streams: accounts.conf's RUN_demo, renamed by gen-secrets.sh.
    accounts = (OPS / "nats" / "accounts.conf").read_text()
    assert re.search(r"^accounts \{\s*RUN_demo \{", accounts, re.M)
    assert "s/RUN_demo/RUN_$RUN/g" in (OPS / "gen-secrets.sh").read_text()
    assert meta["account"] == f"RUN_{run}"
    # lagThreshold is groups (messages) per replica; = what one replica holds at once.
    assert int(meta["lagThreshold"]) == cfg.verify.concurrency
    assert meta["useHttps"] == "false"
    so = _scaled_object()
    assert so["metadata"]["namespace"] == "rlvr"
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "rlvr-verify"}
    behavior = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 60


def test_gen_secrets_renders_the_scaled_object_s_account(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: gen-secrets.sh cannot make certificates")
    run = _load_run_config(tmp_path).run
    out = tmp_path / "secrets"
    subprocess.run(["sh", str(OPS / "gen-secrets.sh"), "-r", run, "-o", str(out), "-c", str(out)],
                   check=True, capture_output=True, timeout=60)
    (account,) = re.findall(r"^accounts \{\s*(\S+) \{", (out / "accounts.conf").read_text(), re.M)
    assert account == _trigger(_scaled_object())["account"]


def test_scaled_object_endpoint_is_nats_headless_monitoring_port() -> None:
    host, port = _trigger(_scaled_object())["natsServerMonitoringEndpoint"].rsplit(":", 1)
    service, namespace, *rest = host.split(".")
    assert (namespace, rest) == ("rlvr", ["svc", "cluster", "local"])
    docs = _docs(K8S / "nats.yaml")
    (svc,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == service]
    # Headless, so KEDA reaches each node as <server_name>.<endpoint> (the consumer's leader).
    assert svc["spec"]["clusterIP"] == "None" and svc["metadata"]["namespace"] == namespace
    assert {"name": "monitor", "port": int(port)} in svc["spec"]["ports"]
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    assert sts["spec"]["serviceName"] == service
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert {"name": "monitor", "containerPort": int(port)} in container["ports"]
    conf = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["nats.conf"]
    assert f"http: 0.0.0.0:{port}" in conf  # plain HTTP: useHttps "false"
    assert "https:" not in conf
    # Node names = pod names = the DNS labels under the headless Service.
    assert re.search(r"^server_name: \$POD_NAME$", conf, re.M)
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_a_real_server_answers_keda_s_query_for_those_names(tmp_path: Path) -> None:
    """The shipped auth config, rendered for the run: KEDA's /jsz query finds the consumer and its lag."""
    from rlvr.actors.bus import Bus
    from rlvr.actors.config import BusConfig, NatsConfig
    from rlvr.protocol.subjects import RunNames
    from tests.actors.natsauth import AuthServer, start_server, stop_server

    run = _load_run_config(tmp_path).run
    meta = _trigger(_scaled_object())
    server = AuthServer(tmp_path, run)
    text = (server.secrets / "nats.conf").read_text()
    assert "http: 0.0.0.0:8222" in text and "store_dir: /data/nats" in text
    conf = server.secrets / "keda-test.conf"  # beside accounts.conf, which it includes
    conf.write_text(text.replace("http: 0.0.0.0:8222", "http: 127.0.0.1:-1")
                    .replace("store_dir: /data/nats", f"store_dir: {tmp_path / 'js'}"))
    proc, server.port = start_server(conf, server.log, env=server.env)
    try:
        monitor = int(re.search(r"Starting http monitor on 127\.0\.0\.1:(\d+)", server.log.read_text()).group(1))

        async def bus(role: str) -> Bus:
            cfg = NatsConfig(**server.nats_section(request_timeout_s=3.0)).for_role(role)
            return await Bus.connect(cfg, BusConfig(), RunNames(run), f"{role}-test")

        async def scenario() -> None:
            learn = await bus("learn")
            try:
                await learn.ensure_topology()  # the streams and the durable `verify`
            finally:
                await learn.close()
            rollout = await bus("rollout")  # three samples for the verifiers, as a rollout sends them
            try:
                for i in range(3):
                    await rollout.js.publish(rollout.names.rollouts, b"sample", headers={"Nats-Msg-Id": f"t{i}/0"})
            finally:
                await rollout.close()

        anyio.run(scenario)
        # The URL KEDA builds (pkg/scalers/nats_jetstream_scaler.go, getNATSJetStreamMonitoringURL).
        query = urllib.parse.urlencode({"acc": meta["account"], "consumers": "true", "config": "true"})
        host = f"127.0.0.1:{monitor}"  # stands for natsServerMonitoringEndpoint
        with urllib.request.urlopen(f"http://{host}/jsz?{query}", timeout=10) as resp:
            jsz = json.load(resp)
    finally:
        stop_server(proc)
    (account,) = [a for a in jsz["account_details"] if meta["account"] in (a["name"], a["id"])]
    (stream,) = [s for s in account["stream_detail"] if s["name"] == meta["stream"]]
    (consumer,) = [c for c in stream["consumer_detail"] if c["name"] == meta["consumer"]]
    # KEDA's lag (getMaxMsgLag): waiting plus held by a verifier.
    assert consumer["num_pending"] + consumer["num_ack_pending"] == 3


# --- one autoscaler at a time --------------------------------------------------


def _component() -> dict:
    (doc,) = _docs(KEDA_DIR / "kustomization.yaml")
    return doc


def test_keda_component_swaps_the_hpa_for_the_scaled_object() -> None:
    base = next(d for d in _docs(K8S / "kustomization.yaml") if d["kind"] == "Kustomization")
    # The default is the CPU HPA: the base lists verify.yaml (Deployment + HPA),
    # neither the ScaledObject nor the component; the switch is one commented line.
    assert "verify.yaml" in base["resources"] and "components" not in base
    assert not any("keda" in r for r in base["resources"])
    assert re.search(r"^# components: \[keda\]$", (K8S / "kustomization.yaml").read_text(), re.M)
    comp = _component()
    assert (comp["apiVersion"], comp["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component")
    assert comp["resources"] == [SCALED_OBJECT.name]
    (patch,) = comp["patches"]
    deleted = yaml.safe_load(patch["patch"])
    assert deleted.pop("$patch") == "delete"
    (hpa,) = [d for d in _docs(K8S / "verify.yaml") if d["kind"] == "HorizontalPodAutoscaler"]
    assert deleted == {"apiVersion": hpa["apiVersion"], "kind": hpa["kind"], "metadata": hpa["metadata"]}
    # ...and that HPA would fight the ScaledObject: both target the same Deployment.
    assert hpa["spec"]["scaleTargetRef"] == _scaled_object()["spec"]["scaleTargetRef"]


def _kustomize(root: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize` not run")
    out = subprocess.run([kubectl, "kustomize", str(root)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d is not None]


def _autoscalers(docs: list[dict]) -> list[tuple[str, str]]:
    return [(d["kind"], d["spec"]["scaleTargetRef"]["name"]) for d in docs
            if d["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")]


def test_kustomize_renders_the_hpa_by_default_and_the_scaled_object_with_the_component(tmp_path: Path) -> None:
    assert _autoscalers(_kustomize(K8S)) == [("HorizontalPodAutoscaler", "rlvr-verify")]
    # The documented switch: uncomment `components: [keda]` (here in a copy).
    copy_root = tmp_path / "k8s"
    shutil.copytree(K8S, copy_root)
    kust = copy_root / "kustomization.yaml"
    kust.write_text(re.sub(r"^# (components: \[keda\])$", r"\1", kust.read_text(), flags=re.M))
    docs = _kustomize(copy_root)
    assert _autoscalers(docs) == [("ScaledObject", "rlvr-verify")]
    # What the cluster gets is valid too, whole.
    for doc in docs:
        if doc["kind"] == "ScaledObject":
            _keda_validate(doc)
        else:
            _k8s_validate(doc, K8S_VERSIONS[0])


# --- the NetworkPolicy: KEDA reaches the monitoring port, nothing else more ----


def test_network_policy_admits_keda_to_the_monitoring_port_only() -> None:
    (policy,) = _docs(K8S / "network-policy.yaml")
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app": "nats"}}
    outside = []
    for rule in policy["spec"]["ingress"]:
        ports = [p["port"] for p in rule["ports"]]
        for peer in rule["from"]:
            assert "ipBlock" not in peer, rule
            if "namespaceSelector" in peer:
                outside.append((peer, ports))
            else:
                assert set(peer) == {"podSelector"}, rule  # this namespace only
    # One peer from another namespace: KEDA's operator pods in `keda` (both
    # selectors in the same peer: AND), on 8222 and nothing else.
    assert outside == [({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}},
                         "podSelector": {"matchLabels": {"app": "keda-operator"}}}, [8222])]
