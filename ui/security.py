"""Request checks run before any route: Host allowlist, cross-site writes, and the API token.

- Host: a page on another site that rebinds its DNS name to 127.0.0.1 still sends its own name as
  Host, so anything but this server's names gets 400.
- Origin: a browser marks cross-site requests with Origin; a write from another origin gets 403
  (without a token, a local UI is otherwise open to any page the user visits).
- Token: with one configured, every /api call and the OpenAPI schema need `Authorization: Bearer
  TOKEN` (compared in constant time). The HTML pages and static files carry no data and stay open;
  the pages ask for the token and send it with each API call.
"""

from __future__ import annotations

import hmac
import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["GuardMiddleware"]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class GuardMiddleware:
    def __init__(self, app: ASGIApp, *, allowed_hosts: frozenset[str], token: str | None) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self.refuse(scope["method"], scope["path"], headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message, extra = refusal
        body = json.dumps({"detail": message}).encode()
        response_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        response_headers += [(k.encode(), v.encode()) for k, v in extra.items()]
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": body})

    def refuse(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str, dict[str, str]] | None:
        host = _hostname(headers.get("host", ""))
        if host not in self.allowed_hosts:
            return 400, f"Host {headers.get('host', '')!r} is not allowed; open the UI at an address it serves", {}
        origin = headers.get("origin")
        if method not in _SAFE_METHODS and origin and origin != "null" and _hostname(origin) not in self.allowed_hosts:
            return 403, f"Cross-site request from {origin!r} refused", {}
        if self.token and (path.startswith("/api/") or path == "/openapi.json"):
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
                return (
                    401,
                    "This UI needs its access token: send `Authorization: Bearer TOKEN` (the --token given to "
                    "`elastune ui`, or ELASTUNE_UI_TOKEN)",
                    {"www-authenticate": "Bearer"},
                )
        return None


def _hostname(value: str) -> str:
    """'127.0.0.1:8710' -> '127.0.0.1', '[::1]:80' -> '::1', 'http://a.b:1' -> 'a.b'."""
    if "://" in value:
        return (urlsplit(value).hostname or "").lower()
    try:
        return (urlsplit(f"//{value}").hostname or "").lower()
    except ValueError:  # a malformed port or bracket
        return ""
