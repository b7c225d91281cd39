"""Where ``svit chat`` finds its model: flags first, then the environment.

The API key is only ever read from an environment variable (``OPENAI_API_KEY``, or the
one ``--api-key-env`` names), never from the command line, where other users of the
machine and shell histories would see it. It is kept out of every ``repr``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["DEFAULT_KEY_VARIABLE", "DEFAULT_RETRIES", "DEFAULT_TIMEOUT", "ChatConfig", "ConfigProblem", "resolve_config"]

DEFAULT_KEY_VARIABLE = "OPENAI_API_KEY"
#: Seconds to wait for the model's next bytes before a request counts as timed out.
DEFAULT_TIMEOUT = 60.0
#: How often the client repeats a request that failed in a way a retry may fix.
DEFAULT_RETRIES = 2


class ConfigProblem(Exception):
    """What the person must set before ``svit chat`` can start (a usage error)."""


@dataclass(frozen=True)
class ChatConfig:
    model: str
    api_key: str = field(repr=False)
    base_url: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    instructions: str | None = None
    stream: bool = True


def resolve_config(
    environ: Mapping[str, str],
    *,
    model: str | None = None,
    base_url: str | None = None,
    api_key_env: str | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    instructions: str | None = None,
    stream: bool = True,
) -> ChatConfig:
    """The configuration from flags (the keyword arguments) over ``environ``;
    :class:`ConfigProblem` says what is missing or wrong, never echoing a key."""
    chosen_model = (model or environ.get("SVIT_CHAT_MODEL") or "").strip()
    if not chosen_model:
        raise ConfigProblem("svit chat needs a model: pass --model or set SVIT_CHAT_MODEL")
    variable = api_key_env or DEFAULT_KEY_VARIABLE
    if not variable.replace("_", "").isalnum():
        raise ConfigProblem("--api-key-env takes the name of an environment variable (letters, digits, _)")
    key = environ.get(variable) or ""
    if not key.strip():
        hint = "" if api_key_env else " (or name another variable with --api-key-env)"
        raise ConfigProblem(f"svit chat needs an API key: set {variable}{hint}")
    chosen_timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    if not (math.isfinite(chosen_timeout) and 0 < chosen_timeout <= 3600):
        raise ConfigProblem("--timeout takes seconds between 0 and 3600")
    chosen_retries = DEFAULT_RETRIES if retries is None else retries
    if not 0 <= chosen_retries <= 10:
        raise ConfigProblem("--retries takes a count from 0 to 10")
    chosen_base = (base_url or environ.get("OPENAI_BASE_URL") or "").strip() or None
    if chosen_base is not None and not chosen_base.startswith(("http://", "https://")):
        raise ConfigProblem("the model's base URL must start with http:// or https://")
    return ChatConfig(chosen_model, key.strip(), chosen_base, float(chosen_timeout), chosen_retries, instructions, stream)
