"""One redaction function for every text that leaves the host: credentials out, the rest kept."""

from __future__ import annotations

import pytest

from svit.redact import REDACTED, redact, register_secret

KEYS = [
    "sk-test-secret-key",
    "sk-proj-AbCdEf0123456789_xyz",
    "sk-ant-api03-AbCdEf0123456789",
    "ghp_0123456789abcdefghijABCDEFGHIJ",
    "xoxb-1234567890-abcdefghij",
    "AKIAABCDEFGHIJKLMNOP",
    "AIzaSyA0123456789abcdefghijklmnopqrstuv",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXBhcnQ",
    "0123456789abcdef0123456789abcdef01234567",
    "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MEFCQ0RFRkdISUpL",
]


@pytest.mark.parametrize("key", KEYS)
def test_key_shaped_tokens_are_redacted(key: str) -> None:
    text = redact(f"provider said: invalid key {key} (check it)")
    assert key not in text and REDACTED in text and text.startswith("provider said: invalid key ")


@pytest.mark.parametrize(
    "text, secret",
    [
        ("you sent Bearer abcdefgh12345", "abcdefgh12345"),
        ("you sent bearer abcdefgh12345", "abcdefgh12345"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
        ('{"authorization": "Token-abcdefgh"}', "Token-abcdefgh"),
        ("x-api-key=plainvalue123", "plainvalue123"),
        ("api_key: 'quoted-value-1'", "quoted-value-1"),
        ("url?access_token=abc123def&x=1", "abc123def"),
        ("client_secret=s3cr3t!", "s3cr3t!"),
        ("password = hunter2", "hunter2"),
    ],
)
def test_named_credentials_are_redacted(text: str, secret: str) -> None:
    assert secret not in redact(text)


def test_registered_and_given_secrets_are_redacted_wherever_they_appear() -> None:
    register_secret("opaque-credential-value")
    assert redact("echo: opaque-credential-value!") == f"echo: {REDACTED}!"
    assert redact("x plain-given-secret y", ["plain-given-secret"]) == f"x {REDACTED} y"
    register_secret("unused")  # too short to be told apart from ordinary words
    assert redact("the key is unused") == "the key is unused"


@pytest.mark.parametrize(
    "text",
    [
        "model provider returned HTTP 400: model does not exist",
        "port /ports/http failed: request timed out",
        "script failed: /lib/run.svit-script:3: expected a list, got a map",
        "the basic idea is a token limit of 4096 tokens",
        "invalid state path: /memory/some/deeply/nested/path/with/many/parts/inside",
        "a long_identifier_without_any_digits_or_capitals_at_all_here",
    ],
)
def test_ordinary_diagnostics_are_kept(text: str) -> None:
    assert redact(text) == text
