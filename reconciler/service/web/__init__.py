"""The reconciler's read-only HTTP views: the JSON API under ``/api/v1`` (``api``) and the web
page at ``/`` (``page``), served next to ``/metrics`` on the same port. Both read a
``ViewSource``: the leader's folded state, or a log folded for the purpose (``demo --hold``,
tests on the recorded fixture)."""

from aiohttp import web

from reconciler.service.web.access import KubeAccess
from reconciler.service.web.api import ViewSource, add_api_routes
from reconciler.service.web.page import add_page_routes

__all__ = ["KubeAccess", "ViewSource", "add_api_routes", "add_page_routes", "add_routes"]


def add_routes(app: web.Application, source: ViewSource, access: KubeAccess | None = None) -> None:
    """The API and the page on one aiohttp application (``access``: api.add_api_routes)."""
    add_api_routes(app, source, access)
    add_page_routes(app)
