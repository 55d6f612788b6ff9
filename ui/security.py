"""Request checks run before any route: Host allowlist, cross-site writes, and the API token.

- Host: a page on another site that rebinds its DNS name to 127.0.0.1 still sends its own name as
  Host, so anything but this server's names gets 400.
- Cross-site writes: a browser marks cross-site requests with Origin; a write from another origin
  gets 403 (without a token, a local UI is otherwise open to any page the user visits). So does
  `Origin: null` (what a sandboxed iframe, a data: URL or a file: page sends), a write whose
  `Sec-Fetch-Site` says cross-site, and a write with no Origin whose Referer names another site.
- Token: with one configured, every /api call needs `Authorization: Bearer TOKEN` (compared in
  constant time). The HTML pages, static files, the OpenAPI schema and its docs page (/api/docs)
  carry no data and stay open; the pages ask for the token and send it with each API call, and the
  docs page takes it through its Authorize button.
"""

from __future__ import annotations

import hmac
import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["GuardMiddleware"]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Open without the token: they describe the API and hold no data (the docs page must load to take a token).
_OPEN_PATHS = frozenset({"/openapi.json", "/api/docs"})  # its scripts are under /docs-assets/, outside /api/


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
        if method not in _SAFE_METHODS:
            refused = self.cross_site(headers)
            if refused:
                return 403, f"Cross-site request refused: {refused}", {}
        if self.token and path.startswith("/api/") and path not in _OPEN_PATHS:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
                return (
                    401,
                    "This UI needs its access token: send `Authorization: Bearer TOKEN` (the token `elastune ui` "
                    "was given in ELASTUNE_UI_TOKEN or --token-file; on /api/docs, the Authorize button)",
                    {"www-authenticate": "Bearer"},
                )
        return None

    def cross_site(self, headers: dict[str, str]) -> str | None:
        """Why a write comes from another site's page, or None. A script (curl, httpx) sends none
        of these headers and passes; a browser always sends Origin or Sec-Fetch-Site on a write."""
        origin = headers.get("origin")
        if origin is not None:
            if origin.strip().lower() == "null":
                return "Origin null (a sandboxed frame or a local file)"
            if _hostname(origin) not in self.allowed_hosts:
                return f"Origin {_shown(origin)}"
            return None
        if headers.get("sec-fetch-site", "").lower() == "cross-site":
            return "Sec-Fetch-Site: cross-site"
        referer = headers.get("referer")
        if referer is not None and _hostname(referer) not in self.allowed_hosts:
            return f"no Origin and Referer {_shown(referer)}"
        return None


def _shown(value: str) -> str:
    return repr(value[:200])


def _hostname(value: str) -> str:
    """'127.0.0.1:8710' -> '127.0.0.1', '[::1]:80' -> '::1', 'http://a.b:1' -> 'a.b'."""
    if "://" in value:
        return (urlsplit(value).hostname or "").lower()
    try:
        return (urlsplit(f"//{value}").hostname or "").lower()
    except ValueError:  # a malformed port or bracket
        return ""
