"""Reading a request body under a byte bound, refusing early rather than buffering."""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request

from .refusals import HttpRefusal

__all__ = ["read_bounded"]


def _too_large(limit: int) -> HttpRefusal:
    return HttpRefusal(413, "payload_too_large", f"the request body is larger than {limit} bytes")


async def read_bounded(request: Request, limit: int) -> bytes:
    """The body, at most ``limit`` bytes: a larger ``Content-Length`` is refused before a
    byte is read, and a chunked body as soon as its chunks pass the bound."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HttpRefusal(400, "invalid_request", "Content-Length is not a number")
        if int(declared) > limit:
            raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise HttpRefusal(400, "invalid_request", "the client left before sending the whole body") from None
    return b"".join(chunks)
