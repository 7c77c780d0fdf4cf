"""Bus credentials: read them from where the config points, and keep them out of every output.

``NatsConfig`` holds only *where* a secret is (a file path, an environment
variable's name), never the secret itself, so the resolved config can be
logged, stored in the run's KV bucket and written next to a run without
leaking anything. ``connect_options`` reads the secrets at connect time and
turns them into nats-py ``connect`` keywords; every value it reads is also
registered here, and ``redact`` (a structlog processor runs it on every log
line, ``rlvr.actors.logs``) replaces a registered value, and the password
part of any URL, with ``***`` wherever it would be printed.

Not here: which credentials a role should have (``ops/nats/``, the shipped
per-role users), and checking the config's shape (``NatsConfig`` does that
when it is decoded, naming the key).
"""

from __future__ import annotations

import os
import re
import ssl
from pathlib import Path
from typing import Any

from rlvr.actors.config import NatsConfig

REDACTED = "***"

# Values read from secret files or variables in this process, longest first
# so that a secret containing another is replaced whole.
_secrets: list[str] = []

# "scheme://userinfo@host": the userinfo is a password or a token.
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


class NatsCredentialsError(ValueError):
    """A credential the config names that cannot be read; the message names the key, never the value."""


def register_secret(value: str) -> None:
    """Remember ``value`` so that ``redact`` hides it from now on (short values are ignored:
    hiding every "a" would mangle the logs without protecting anything)."""
    value = value.strip()
    if len(value) >= 4 and value not in _secrets:
        _secrets.append(value)
        _secrets.sort(key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every registered secret and every URL's userinfo replaced by ``***``."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)


def redact_tree(obj: Any) -> Any:
    """``redact`` applied to every string inside dicts, lists and tuples."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: redact_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_tree(v) for v in obj)
    if isinstance(obj, BaseException):
        return redact(f"{type(obj).__name__}: {obj}")
    return obj


def redact_log_event(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: no secret leaves through a log line, whatever field carries it."""
    return {k: redact_tree(v) for k, v in event.items()}


def _read_file(path: str, key: str) -> str:
    try:
        value = Path(path).expanduser().read_text().strip()
    except OSError as e:
        raise NatsCredentialsError(f"nats.{key}: cannot read {path}: {e.strerror or e}") from None
    if not value:
        raise NatsCredentialsError(f"nats.{key}: {path} is empty")
    return value


def _check_readable(path: str, key: str) -> str:
    resolved = Path(path).expanduser()
    if not resolved.is_file() or not os.access(resolved, os.R_OK):
        raise NatsCredentialsError(f"nats.{key}: {path} is not a readable file")
    return str(resolved)


def read_password(cfg: NatsConfig) -> str | None:
    """The password the config points at (file or variable), or None when it names none."""
    if cfg.password_file:
        value = _read_file(cfg.password_file, "password_file")
    elif cfg.password_env:
        value = os.environ.get(cfg.password_env, "").strip()
        if not value:
            raise NatsCredentialsError(f"nats.password_env: environment variable {cfg.password_env} is unset or empty")
    else:
        return None
    register_secret(value)
    return value


def tls_context(cfg: NatsConfig) -> ssl.SSLContext | None:
    """A client TLS context from the CA and the client certificate the config names, or None."""
    if not (cfg.tls_ca_file or cfg.tls_cert_file):
        return None
    ca = _check_readable(cfg.tls_ca_file, "tls_ca_file") if cfg.tls_ca_file else None
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
        if cfg.tls_cert_file:
            ctx.load_cert_chain(
                _check_readable(cfg.tls_cert_file, "tls_cert_file"), _check_readable(cfg.tls_key_file, "tls_key_file")
            )
    except ssl.SSLError as e:
        raise NatsCredentialsError(f"nats.tls_*: cannot load the TLS files: {e.reason or e}") from None
    return ctx


def connect_options(cfg: NatsConfig) -> dict[str, Any]:
    """nats-py ``connect`` keywords for the credentials and TLS the config names.

    Raises ``NatsCredentialsError`` naming the key when a named file or
    variable cannot be read: a missing secret is a config fault, found before
    the first connection attempt rather than as an authorization error later.
    """
    # A config not yet given a role (a test, a tool) replies on the plain inbox.
    inbox = cfg.inbox_prefix.replace(".{role}", "").replace("{role}", "")
    opts: dict[str, Any] = {"inbox_prefix": inbox or "_INBOX"}
    password = read_password(cfg)
    if password is not None:
        opts.update(user=cfg.user, password=password)
    if cfg.creds_file:
        # nats-py reads the file itself on every (re)connect; the seed in it
        # never passes through our code, so there is nothing to register.
        opts["user_credentials"] = _check_readable(cfg.creds_file, "creds_file")
    if cfg.nkey_seed_file:
        seed_path = _check_readable(cfg.nkey_seed_file, "nkey_seed_file")
        register_secret(Path(seed_path).read_text())
        opts["nkeys_seed"] = seed_path
    tls = tls_context(cfg)
    if tls is not None:
        opts["tls"] = tls
        if cfg.tls_hostname:
            opts["tls_hostname"] = cfg.tls_hostname
    return opts


__all__ = [
    "NatsCredentialsError",
    "REDACTED",
    "connect_options",
    "read_password",
    "redact",
    "redact_log_event",
    "redact_tree",
    "register_secret",
    "tls_context",
]
