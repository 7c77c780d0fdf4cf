"""The config sections every role shares: the NATS connection, the bus, logs and traces.

Every struct forbids unknown keys, so a typo is an error that names the key.
Each component is handed only its own section, never the whole config.

Not here: the whole-run ``Config`` that names each role's section. It lives in
``rlvr.cli.run_config``, which only the entry layer (``rlvr.cli``) imports,
so that the runtime every role shares never imports a
role. The comments on each field are the option reference: ``rlvr-actor
config-doc`` prints them (docs/config.md is that output).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, TypeVar

import msgspec
from msgspec import Meta, Struct

from rlvr.protocol.subjects import validate_run_id

T = TypeVar("T")
Seconds = Annotated[float, Meta(gt=0)]


class NatsConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # NATS server URL(s), comma separated. `up` replaces it with its embedded server.
    # Never put credentials in it (user:password@ is refused): use the keys below.
    url: str = "nats://127.0.0.1:4222"
    # Seconds to wait for the first connection before giving up with an error.
    connect_timeout_s: Seconds = 5.0
    # Seconds between reconnect attempts after a lost connection.
    reconnect_wait_s: Seconds = 1.0
    # Reconnect attempts before the actor exits non-zero (-1: forever).
    max_reconnect_attempts: int = 60
    # Deadline for every JetStream API call and publish acknowledgement.
    request_timeout_s: Seconds = 10.0
    # User name for user/password auth (ops/gen-secrets.sh makes one user per role).
    # In this and every file/variable key below, "{role}" stands for the connecting
    # role (learn, rollout, verify; "ops" for `status`), so one run config serves all.
    user: str = ""
    # File holding that user's password (its first line; read at connect, never logged).
    password_file: str = ""
    # Or: the environment variable holding the password.
    password_env: str = ""
    # NATS credentials file (user JWT + NKEY seed), for operator/JWT deployments.
    creds_file: str = ""
    # File holding a user NKEY seed (SU...), for nkey users in the server config.
    nkey_seed_file: str = ""
    # CA certificate(s) that sign the server's certificate (PEM); set it to require TLS.
    tls_ca_file: str = ""
    # Client certificate (PEM), for servers that verify clients; needs tls_key_file.
    tls_cert_file: str = ""
    # The client certificate's private key (PEM).
    tls_key_file: str = ""
    # Server name to verify in its certificate when the URL names it otherwise (an IP).
    tls_hostname: str = ""
    # Prefix of this connection's reply subjects. Per role by default, so that the
    # shipped permissions let no user subscribe to another user's replies.
    inbox_prefix: str = "_INBOX.{role}"

    def __post_init__(self) -> None:
        # Raised errors name the key; msgspec appends the section's path.
        for part in self.url.split(","):
            if "@" in part.split("://", 1)[-1].split("/", 1)[0]:
                raise ValueError(
                    "nats.url must not carry credentials (user:password@ or token@): they would reach "
                    "logs and the run's KV config; use nats.user with nats.password_file or nats.password_env"
                )
        if self.password_file and self.password_env:
            raise ValueError("set one of nats.password_file and nats.password_env, not both")
        if bool(self.user) != bool(self.password_file or self.password_env):
            raise ValueError("nats.user needs nats.password_file or nats.password_env, and they need nats.user")
        schemes = [bool(self.user), bool(self.creds_file), bool(self.nkey_seed_file)]
        if sum(schemes) > 1:
            raise ValueError("set one of nats.user, nats.creds_file and nats.nkey_seed_file")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("nats.tls_cert_file and nats.tls_key_file go together")

    def for_role(self, role: str) -> NatsConfig:
        """This config with "{role}" in the user and the credential keys replaced by ``role``."""
        keys = ("user", "password_file", "password_env", "creds_file", "nkey_seed_file", "tls_cert_file",
                "tls_key_file", "inbox_prefix")
        changes = {k: getattr(self, k).replace("{role}", role) for k in keys if "{role}" in getattr(self, k)}
        return msgspec.structs.replace(self, **changes) if changes else self


class BusConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Seconds a consumer may hold a message before JetStream redelivers it.
    # Long work sends in_progress well inside this window.
    ack_wait_s: Seconds = 30.0
    # Deliveries before a message is dead-lettered with its last error.
    max_deliver: Annotated[int, Meta(ge=1)] = 5
    # Deliveries after which a message that made its handler raise, or that came
    # back unsettled (its holder died or hung), is dead-lettered as a poison pill
    # so it cannot crash-loop a role. Capped at max_deliver - 1, so the last
    # delivery always settles the message and none is left stuck.
    poison_after: Annotated[int, Meta(ge=1)] = 4
    # Unacknowledged messages one durable consumer may have outstanding.
    max_ack_pending: Annotated[int, Meta(ge=1)] = 4096
    # JetStream duplicate window: republished messages with the same Nats-Msg-Id inside it are dropped.
    duplicate_window_s: Seconds = 600.0
    # How long SCORED keeps samples for replay after a learner crash.
    # Retention is the learner's: other roles never change it (they only check the streams exist).
    scored_max_age_s: Seconds = 7 * 86400.0
    # Bytes SCORED may hold; past it the oldest samples go first. JetStream
    # reserves this much storage when the stream is created (`up` checks its server can).
    scored_max_bytes: Annotated[int, Meta(ge=1 << 20)] = 2 << 30
    # How long DEAD keeps dead letters for inspection or replay.
    dead_max_age_s: Seconds = 14 * 86400.0
    # Bytes DEAD may hold; past it the oldest letters go first.
    dead_max_bytes: Annotated[int, Meta(ge=1 << 20)] = 256 << 20
    # Seconds a rollout or verifier waits at start for the learner (or `rlvr-actor init`)
    # to create the run's streams and consumers, logging what it waits for, before it fails.
    topology_wait_s: Seconds = 300.0
    # Heartbeat period on the status subject.
    heartbeat_every_s: Seconds = 2.0
    # Delay before a message nak'ed after an infrastructure fault is redelivered.
    nak_delay_s: Annotated[float, Meta(ge=0)] = 2.0
    # On SIGTERM: seconds to finish work in hand before naking it and exiting.
    drain_timeout_s: Seconds = 6.0
    # Longest a pull request waits for messages; bounds how fast a stop is noticed.
    fetch_timeout_s: Seconds = 1.0
    # Storage for streams: "file" survives a server restart, "memory" does not.
    storage: Literal["file", "memory"] = "file"
    # Stream replicas (3 on a NATS cluster).
    replicas: Annotated[int, Meta(ge=1, le=5)] = 1
    # Bytes of the samples of one group, encoded. A group too large for one message (past half
    # the server's max_payload: the other half is its verdicts' room) travels by reference: its
    # samples go to the run's bodies bucket (docs/design.md, "Groups larger than a message").
    # Past this bound the rollout publishes the group as rejected samples that name this key,
    # and a verifier or learner refuses a reference that claims more: what one group may make a
    # role hold in memory (a 1M-token sample is about 17 MB).
    max_group_bytes: Annotated[int, Meta(ge=1 << 20)] = 1 << 30


class ObservabilityConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # "auto": readable on a TTY, JSON lines otherwise.
    log_format: Literal["auto", "json", "console"] = "auto"
    # Least severe log level printed; library (stdlib) logs are never below "warning".
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Span exporter when OTEL_EXPORTER_OTLP_ENDPOINT is unset (set, it always wins).
    trace_exporter: Literal["none", "console", "file"] = "none"
    # Directory for "file" traces: one JSON-lines file per process.
    trace_dir: str = "traces"
    # Head sampling: the fraction of trajectories traced, decided once where a
    # trace starts (the feeder) and followed by every later hop (parent-based).
    # An unsampled trajectory costs almost nothing; a sampled one keeps its
    # whole cross-process trace. Optimizer steps and weight loads are always
    # traced (they are few). 1.0 traces every trajectory (`up --trace-all`).
    trace_sample_ratio: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.02
    # A "file" trace past this size is rotated to <name>.1.jsonl (replacing the
    # previous one), so a process keeps at most twice this on disk; 0 = no cap.
    trace_file_max_mb: Annotated[float, Meta(ge=0.0)] = 64.0


class SharedSections(Struct, frozen=True):
    """The sections every role shares, read from a whole-run config file while
    ignoring the role sections (which only the entry layer knows)."""

    # Run id: names the streams, buckets and subjects of this run.
    run: str = "demo"
    # Seed for every random choice of the run (feeder order, sampling, init).
    seed: int = 0
    # Connection to the NATS server.
    nats: NatsConfig = NatsConfig()
    # JetStream streams and consumers: redelivery, retention, heartbeats, shutdown.
    bus: BusConfig = BusConfig()
    # Logs and traces of every role.
    observability: ObservabilityConfig = ObservabilityConfig()

    def __post_init__(self) -> None:
        try:
            validate_run_id(self.run)
        except ValueError as e:
            raise msgspec.ValidationError(f"{e} - at `$.run`") from None


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the key."""


def read_config(path: str | Path | None, overrides: dict | None = None) -> tuple[dict, str]:
    """The raw config (TOML, or the JSON that `up` writes back) with the
    command line's dotted ``overrides`` applied, and its source for errors."""
    raw: dict = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        # TOML is what people write; JSON is what `up` writes back (the
        # resolved config: TOML cannot express an explicit null).
        is_json = str(path).endswith(".json")
        try:
            data = Path(path).read_bytes()
            raw = msgspec.json.decode(data) if is_json else msgspec.toml.decode(data)
        except FileNotFoundError:
            raise ConfigError(f"config file {source} does not exist") from None
        except msgspec.DecodeError as e:
            kind = "JSON" if is_json else "TOML"
            raise ConfigError(f"config error in {source}: not valid {kind}: {e}") from None
    for dotted, value in (overrides or {}).items():
        node = raw
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return raw, source


def convert_config(raw: dict, typ: type[T], source: str) -> T:
    try:
        return msgspec.convert(raw, typ)
    except msgspec.ValidationError as e:
        raise ConfigError(f"config error in {source}: {e}") from None


__all__ = [
    "BusConfig", "ConfigError", "NatsConfig", "ObservabilityConfig", "Seconds", "SharedSections", "convert_config",
    "read_config",
]
