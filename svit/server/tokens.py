"""Bearer tokens of ``svit serve``: who may read or write which address prefix.

A token set is a JSON list of ``{"token", "prefix", "access"}`` entries, from a file or
the ``SVIT_SERVE_TOKENS`` variable; there is no default, so a server without tokens
grants nothing (the command refuses to start). A token is at least 16 characters, a
prefix is the start of a process address (``svit://`` and more, no whitespace), access
is ``"read"`` or ``"write"`` (write covers read). A prefix covers an address that
starts with it as text: end it with ``/`` to cover one folder of addresses.

Tokens are secrets: a presented token is compared with every entry through SHA-256
digests and :func:`hmac.compare_digest` (no early exit, no length leak), and no message
ever repeats one, not even a rejected entry's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "MIN_TOKEN_CHARS",
    "TOKENS_ENV",
    "Access",
    "Forbidden",
    "Grant",
    "InvalidTokens",
    "TokenSet",
    "Unauthorized",
    "check",
]

TOKENS_ENV = "SVIT_SERVE_TOKENS"
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 4096
MAX_PREFIX_BYTES = 256
ADDRESS_PREFIX = "svit://"
ACCESS_LEVELS = ("read", "write")

Access = Literal["read", "write"]

_WHITESPACE = re.compile(r"\s")


class InvalidTokens(ValueError):
    """A token file or variable that cannot be used; the message names the entry, never the token."""


class Unauthorized(Exception):
    """No token, or a token no entry holds (HTTP 401)."""


class Forbidden(Exception):
    """A known token whose prefix or access does not cover the request (HTTP 403)."""


@dataclass(frozen=True)
class Grant:
    """What one token may do: every address starting with ``prefix``, at ``access``."""

    prefix: str
    access: Access
    #: SHA-256 of the token: a stable key (per-token limits) that is not the secret.
    token_digest: bytes

    def covers(self, address: str, need: Access) -> bool:
        return address.startswith(self.prefix) and (self.access == "write" or need == "read")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _check_prefix(prefix: Any, where: str) -> str:
    if type(prefix) is not str:
        raise InvalidTokens(f"{where}: prefix must be text")
    if not prefix.startswith(ADDRESS_PREFIX) or _WHITESPACE.search(prefix) or len(prefix.encode("utf-8", "replace")) > MAX_PREFIX_BYTES:
        raise InvalidTokens(f"{where}: prefix must be the start of a process address (svit://..., no whitespace, at most 256 bytes)")
    return prefix


def _check_entry(entry: Any, where: str) -> tuple[str, Grant]:
    if type(entry) is not dict:
        raise InvalidTokens(f"{where}: expected an object with token, prefix and access")
    unknown = sorted(set(entry) - {"token", "prefix", "access"})
    if unknown:
        raise InvalidTokens(f"{where}: unknown field {unknown[0][:64]!r}")
    token = entry.get("token")
    if type(token) is not str:
        raise InvalidTokens(f"{where}: token must be text")
    if len(token) < MIN_TOKEN_CHARS:
        raise InvalidTokens(f"{where}: token is shorter than {MIN_TOKEN_CHARS} characters")
    if len(token) > MAX_TOKEN_CHARS or _WHITESPACE.search(token) or not token.isprintable():
        raise InvalidTokens(f"{where}: token must be at most {MAX_TOKEN_CHARS} printable characters without whitespace")
    prefix = _check_prefix(entry.get("prefix"), where)
    access = entry.get("access")
    if access not in ACCESS_LEVELS:
        raise InvalidTokens(f"{where}: access must be \"read\" or \"write\"")
    return token, Grant(prefix, access, _digest(token))


class TokenSet:
    """The accepted tokens, each with its grant; immutable once built."""

    def __init__(self, grants: list[Grant]) -> None:
        if not grants:
            raise InvalidTokens("the token list is empty (a server without tokens grants nothing)")
        self._grants = tuple(grants)

    def __len__(self) -> int:
        return len(self._grants)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_json(cls, text: str, *, source: str = "token list") -> TokenSet:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            detail = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
            raise InvalidTokens(f"{source} is not JSON{detail}") from None
        if type(data) is not list:
            raise InvalidTokens(f"{source} must be a JSON list of {{token, prefix, access}} entries")
        grants: list[Grant] = []
        seen: set[bytes] = set()
        for index, entry in enumerate(data):
            where = f"{source}: token entry {index}"
            _, grant = _check_entry(entry, where)
            if grant.token_digest in seen:
                raise InvalidTokens(f"{where}: the same token appears in an earlier entry")
            seen.add(grant.token_digest)
            grants.append(grant)
        if not grants:
            raise InvalidTokens(f"{source} is empty (a server without tokens grants nothing)")
        return cls(grants)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TokenSet:
        name = Path(path).name
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InvalidTokens(f"token file {name} does not exist") from None
        except UnicodeDecodeError:
            raise InvalidTokens(f"token file {name} is not UTF-8 text") from None
        except OSError as exc:
            raise InvalidTokens(f"cannot read token file {name}: {exc.strerror}") from None
        return cls.from_json(text, source=f"token file {name}")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> TokenSet | None:
        """The set in ``SVIT_SERVE_TOKENS``, or None when the variable is unset or empty."""
        text = (os.environ if environ is None else environ).get(TOKENS_ENV)
        if not text:
            return None
        return cls.from_json(text, source=TOKENS_ENV)

    # ------------------------------------------------------------------ checking
    def authenticate(self, token: str | None) -> Grant:
        """The grant of ``token``; :class:`Unauthorized` when it is missing or unknown.

        Every entry is compared (constant time per entry, no early exit)."""
        if not token:
            raise Unauthorized("missing bearer token")
        presented = _digest(token)
        found: Grant | None = None
        for grant in self._grants:
            if hmac.compare_digest(presented, grant.token_digest):
                found = grant
        if found is None:
            raise Unauthorized("unknown bearer token")
        return found

    def authorize(self, token: str | None, address: str, need: Access) -> Grant:
        """The grant of ``token`` if it covers ``address`` at ``need``; else
        :class:`Unauthorized` (no or unknown token) or :class:`Forbidden`."""
        grant = self.authenticate(token)
        check(grant, address, need)
        return grant


def check(grant: Grant, address: str, need: Access) -> None:
    """Raise :class:`Forbidden` unless ``grant`` covers ``address`` at ``need``."""
    if not address.startswith(grant.prefix):
        raise Forbidden("the token does not cover this address")
    if not grant.covers(address, need):
        raise Forbidden("the token is read-only")
