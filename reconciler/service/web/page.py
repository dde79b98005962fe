"""The web page: one HTML file, a script and a style sheet shipped in this package (no build
step). The page polls ``/api/v1`` and draws with ``textContent`` only, so a name a user chose
(``<script>``…) is shown as text, never parsed as markup."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources

from aiohttp import web

_FILES = {"/": ("index.html", "text/html"), "/app.js": ("app.js", "text/javascript"), "/style.css": ("style.css", "text/css")}
# The page needs nothing from elsewhere; say so to the browser, so an injected tag could not load
# or run anything even if escaping failed.
_CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'"


def add_page_routes(app: web.Application) -> None:
    for path, (name, content_type) in _FILES.items():
        body = resources.files(__package__).joinpath(name).read_bytes()
        app.router.add_get(path, _serve(body, content_type))


def _serve(body: bytes, content_type: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(_request: web.Request) -> web.Response:
        return web.Response(
            body=body,
            content_type=content_type,
            charset="utf-8",
            headers={"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
        )

    return handler
