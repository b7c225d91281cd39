"""HTTP refusals of ``svit serve``: one JSON shape for every answer that is not a control response.

``{"error": {"code": ..., "message": ...}}`` with the codes ``unauthorized`` (401),
``forbidden`` (403), ``invalid_request`` / ``invalid_control_id`` (400), ``not_found``
(404), ``payload_too_large`` (413), ``too_many_requests`` (429) and ``unavailable``
(503). Messages never carry a token or a host path.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from ..errors import one_line

__all__ = ["HttpRefusal", "refusal_body", "refusal_response"]


class HttpRefusal(Exception):
    """Raised inside a route: answered with :func:`refusal_response`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def response(self) -> JSONResponse:
        return refusal_response(self.status, self.code, self.message)


def refusal_body(code: str, message: str) -> dict[str, dict[str, str]]:
    """The error shape; a lone surrogate a message repeats from the request (a valid JSON
    escape) becomes ``?``, so the answer can always be encoded as UTF-8."""
    return {"error": {"code": code, "message": one_line(message)}}


def refusal_response(status: int, code: str, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(refusal_body(code, message), status_code=status, headers=headers)
