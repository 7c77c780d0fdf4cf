"""Bus credentials: where the config may hold them, how the actors present them, and that they never print.

Real nats-server for the NKEY and client-certificate logins; the rest is the
config, ``rlvr.actors.secrets`` and the CLI's own error path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from rlvr.actors.bus import Bus, BusConnectError
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.actors.secrets import NatsCredentialsError, connect_options, redact, register_secret
from rlvr.protocol import RunNames
from tests.actors.natsauth import start_server, stop_server
from tests.conftest import write_config

SECRET = "hunter2-correct-horse-battery"


def _nats(**raw) -> NatsConfig:
    return msgspec.convert(raw, NatsConfig)


def test_a_password_in_the_url_is_a_config_error_that_names_the_key_and_not_the_password(tmp_path):
    # Regression (issue 13 item 4): a password in the URL was logged at start
    # ("config_resolved", "actor_start") and stored in the run's KV config.
    cfg = write_config(tmp_path / "run.json", {"run": "s"})
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "--role", "verify", "--config", str(cfg),
         "--nats", f"nats://verify:{SECRET}@127.0.0.1:9"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert out.returncode == 2
    assert "nats.url must not carry credentials" in out.stderr and "$.nats" in out.stderr
    assert SECRET not in out.stdout + out.stderr


def test_a_token_in_the_url_is_refused_too():
    with pytest.raises(msgspec.ValidationError, match="nats.url must not carry credentials"):
        _nats(url=f"nats://127.0.0.1:4222,tls://{SECRET}@nats.example:4222")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"user": "verify"}, "nats.user needs nats.password_file or nats.password_env"),
        ({"password_env": "X"}, "nats.user needs nats.password_file or nats.password_env"),
        ({"user": "v", "password_env": "X", "password_file": "/p"}, "set one of nats.password_file and nats.password_env"),
        ({"user": "v", "password_env": "X", "nkey_seed_file": "/s"}, "set one of nats.user, nats.creds_file and nats.nkey_seed_file"),
        ({"tls_cert_file": "/c.pem"}, "nats.tls_cert_file and nats.tls_key_file go together"),
    ],
)
def test_credential_keys_that_cannot_work_together_are_refused_by_name(raw, message):
    with pytest.raises(msgspec.ValidationError, match=message):
        _nats(**raw)


def test_role_placeholders_give_each_role_its_own_user_files_and_inbox():
    cfg = _nats(user="{role}", password_file="/run/secrets/{role}.password", tls_ca_file="/ca.pem")
    verify = cfg.for_role("verify")
    assert (verify.user, verify.password_file, verify.inbox_prefix) == ("verify", "/run/secrets/verify.password", "_INBOX.verify")
    assert verify.tls_ca_file == "/ca.pem"


def test_a_password_is_read_from_its_file_or_variable_and_a_missing_one_names_the_key(tmp_path, monkeypatch):
    pw = tmp_path / "verify.password"
    pw.write_text(SECRET + "\n")
    opts = connect_options(_nats(user="verify", password_file=str(pw)))
    assert (opts["user"], opts["password"]) == ("verify", SECRET)
    monkeypatch.setenv("RLVR_PW_TEST", SECRET)
    assert connect_options(_nats(user="verify", password_env="RLVR_PW_TEST"))["password"] == SECRET
    with pytest.raises(NatsCredentialsError, match=r"nats.password_file: cannot read .*missing.password"):
        connect_options(_nats(user="verify", password_file=str(tmp_path / "missing.password")))
    monkeypatch.delenv("RLVR_PW_TEST")
    with pytest.raises(NatsCredentialsError, match="nats.password_env: environment variable RLVR_PW_TEST is unset"):
        connect_options(_nats(user="verify", password_env="RLVR_PW_TEST"))
    with pytest.raises(NatsCredentialsError, match="nats.creds_file: .* is not a readable file"):
        connect_options(_nats(creds_file=str(tmp_path / "none.creds")))


def test_redact_hides_registered_secrets_and_url_userinfo():
    register_secret(SECRET)
    assert redact(f"auth failed with {SECRET}!") == "auth failed with ***!"
    assert redact("cannot reach nats://u:p4ss@h:4222, tls://tok@h2") == "cannot reach nats://***@h:4222, tls://***@h2"


def test_every_log_line_is_redacted_whatever_field_or_traceback_carries_the_secret(capsys):
    from rlvr.actors.logs import configure_logging, get_logger

    import structlog

    register_secret(SECRET)
    configure_logging(run="s", role="verify", replica="v", fmt="json")
    try:
        log = get_logger("test")
        try:
            raise RuntimeError(f"server said: bad password {SECRET}")
        except RuntimeError as e:
            log.error("failed", nested={"url": "nats://verify:other-pass@h:1", "why": [SECRET]}, exc_info=e)
        err = capsys.readouterr().err
    finally:
        structlog.reset_defaults()  # the captured stderr closes after this test
    assert "failed" in err and "RuntimeError" in err
    assert SECRET not in err and "other-pass" not in err


def _nkey_user() -> tuple[str, str]:
    nkeys = pytest.importorskip("nkeys")
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    return seed.decode(), nkeys.from_seed(bytearray(seed)).public_key.decode()


@contextlib.contextmanager
def _server_with(tmp_path: Path, conf: str):
    """nats-server with JetStream and ``conf``; yields its nats:// URL."""
    path = tmp_path / "server.conf"
    path.write_text(conf)
    proc, port = start_server(path, tmp_path / "server.log", args=("-js", "-sd", str(tmp_path / "store")))
    try:
        yield f"nats://127.0.0.1:{port}"
    finally:
        stop_server(proc)


def test_an_actor_logs_in_with_an_nkey_seed_file_and_a_wrong_seed_is_refused_without_echoing_it(tmp_path):
    seed, public = _nkey_user()
    other_seed, _ = _nkey_user()
    (tmp_path / "user.nk").write_text(seed + "\n")
    (tmp_path / "other.nk").write_text(other_seed + "\n")
    async def connect(url: str, seed_file: str) -> None:
        cfg = NatsConfig(url=url, nkey_seed_file=seed_file, connect_timeout_s=2.0)
        bus = await Bus.connect(cfg, BusConfig(), RunNames("s"), "t")
        await bus.ensure_topology()
        await bus.close()

    with _server_with(tmp_path, f'authorization {{ users = [ {{ nkey: "{public}" }} ] }}\n') as url:
        anyio.run(connect, url, str(tmp_path / "user.nk"))
        with pytest.raises(BusConnectError) as err:
            anyio.run(connect, url, str(tmp_path / "other.nk"))
    assert other_seed not in str(err.value) and "Authorization" in str(err.value)


def test_an_actor_presents_a_client_certificate_when_the_server_requires_one(tmp_path):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    subprocess.run(["sh", str(Path(__file__).resolve().parents[2] / "ops" / "gen-secrets.sh"), "-o", str(tmp_path / "s")],
                   check=True, capture_output=True, timeout=60)
    s = tmp_path / "s"

    def ssl(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=s, check=True, capture_output=True, timeout=60)

    ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=verify",
        "-keyout", "client-key.pem", "-out", "client.csr")
    (s / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    ssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial", "-days", "2",
        "-extfile", "client.ext", "-out", "client-cert.pem")
    conf = (f'tls {{ cert_file: "{s}/server-cert.pem", key_file: "{s}/server-key.pem", ca_file: "{s}/ca.pem", '
            "verify: true }\n")
    async def connect(url: str, **tls) -> None:
        cfg = NatsConfig(url=url.replace("nats://", "tls://"), tls_ca_file=str(s / "ca.pem"),
                         connect_timeout_s=2.0, **tls)
        bus = await Bus.connect(cfg, BusConfig(), RunNames("s"), "t")
        await bus.close()

    with _server_with(tmp_path, conf) as url:
        anyio.run(lambda: connect(url, tls_cert_file=str(s / "client-cert.pem"), tls_key_file=str(s / "client-key.pem")))
        with pytest.raises(BusConnectError):
            anyio.run(connect, url)
