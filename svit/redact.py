"""Redaction of credentials from any text that leaves the host's hands.

Provider error bodies, port failures and exception texts can carry what a request
was sent with: a server may echo the ``Authorization`` header back in its error.
Every such text is passed through :func:`redact` before it is raised, logged,
stored in an event or shown to the model. It removes, replacing each with
``[redacted]``:

* every secret registered with :func:`register_secret` (a reasoner's API key, the
  values of an HTTP port's configured headers) and any given in the call;
* the credential (8 characters or more) after ``Bearer`` or ``Basic``;
* the value after ``Authorization``, ``Proxy-Authorization``, ``X-API-Key``,
  ``api_key``, ``access_token``, ``client_secret``, ``password`` and similar names,
  written as ``name: value``, ``name=value`` or in JSON;
* tokens shaped like keys: ``sk-...`` (OpenAI, Anthropic), ``ghp_...`` (GitHub),
  ``xoxb-...`` (Slack), ``AKIA...`` (AWS), ``AIza...`` (Google), JSON web tokens, and
  any run of at least 32 hex digits or 40 base64 characters mixing upper case,
  lower case and digits.

Redaction runs before any length cap, so a cut never leaves part of a secret.
"""

from __future__ import annotations

import re
import threading
from typing import Iterable

REDACTED = "[redacted]"

#: Registered secrets shorter than this are not redacted on their own (a placeholder
#: such as "unused" must not blank every word it happens to appear in).
MIN_SECRET_CHARS = 8
#: At most this many secrets are remembered; the oldest is dropped first.
MAX_SECRETS = 256

_lock = threading.Lock()
_secrets: dict[str, None] = {}

_SCHEME = re.compile(r"\b((?i:bearer)|Basic|BASIC)(\s+)[A-Za-z0-9._~+/=\-]{8,}")
_NAMED = re.compile(
    r"""(?ix)
    (\b(?:proxy-)?authorization|\bx-api-key|\bapi[-_ ]?key|\bapikey|\baccess[-_]?token|\brefresh[-_]?token
       |\bclient[-_]?secret|\bsecret[-_]?key|\bpassword|\bpasswd)
    (["']?\s*[:=]\s*["']?)
    ((?:bearer\s+|basic\s+)?[^\s"',;&}]+)
    """
)
_KEY_SHAPED = re.compile(
    r"""(?x)
    \b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,}
    | \bgh[pousr]_[A-Za-z0-9]{20,}
    | \bgithub_pat_[A-Za-z0-9_]{20,}
    | \bxox[abprs]-[A-Za-z0-9\-]{10,}
    | \bAKIA[0-9A-Z]{16}\b
    | \bAIza[0-9A-Za-z_\-]{35}
    | \beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+
    | \b[0-9a-fA-F]{32,}\b
    """
)
_LONG_BASE64 = re.compile(r"(?<![A-Za-z0-9+_\-])[A-Za-z0-9+_\-]{40,}={0,2}")


def register_secret(secret: str | None) -> None:
    """Remember a credential so that every later :func:`redact` removes it."""
    if type(secret) is not str or len(secret) < MIN_SECRET_CHARS:
        return
    with _lock:
        _secrets.pop(secret, None)
        _secrets[secret] = None
        while len(_secrets) > MAX_SECRETS:
            _secrets.pop(next(iter(_secrets)))


def _mixed(match: re.Match[str]) -> str:
    token = match.group(0)
    if any(c.isupper() for c in token) and any(c.islower() for c in token) and any(c.isdigit() for c in token):
        return REDACTED
    return token


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every credential in it replaced by ``[redacted]``."""
    if type(text) is not str:
        text = str(text)
    with _lock:
        known = list(_secrets)
    known.extend(s for s in secrets if type(s) is str and len(s) >= MIN_SECRET_CHARS)
    for secret in sorted(set(known), key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _NAMED.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _SCHEME.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _KEY_SHAPED.sub(REDACTED, text)
    return _LONG_BASE64.sub(_mixed, text)


__all__ = ["REDACTED", "redact", "register_secret"]
