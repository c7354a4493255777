"""Serve the mini web apps from ``assets/web`` under a made-up origin.

Playwright answers every request of a browser context itself (``context.route``), so pages get
short, machine-independent URLs (no ``file://`` path of this checkout in the observation), no
server process or port is needed, and any request outside the origin is blocked: the apps can
never reach the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from playwright.sync_api import BrowserContext, Route

from vlrl.harness import HarnessError

ORIGIN = "http://apps.vlrl.test"
ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets" / "web"
_CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css", ".js": "text/javascript"}


def check_assets() -> None:
    if not (ASSETS_DIR / "common.js").is_file():
        raise HarnessError(f"browser harness: web apps not found in {ASSETS_DIR} (run from a vlrl checkout)")


def page_url(page: str, params: Mapping[str, str]) -> str:
    """The app's address, with the parameters the app reads in the query."""
    return f"{ORIGIN}/{page}?{urlencode(params, safe='|:')}"


def serve(context: BrowserContext) -> None:
    context.route("**/*", _answer)


def _answer(route: Route) -> None:
    url = urlsplit(route.request.url)
    if f"{url.scheme}://{url.netloc}" != ORIGIN:
        route.abort("blockedbyclient")
        return
    path = (ASSETS_DIR / url.path.lstrip("/")).resolve()
    if path.parent != ASSETS_DIR or path.suffix not in _CONTENT_TYPES or not path.is_file():
        route.fulfill(status=404, content_type="text/plain", body="not found")
        return
    route.fulfill(status=200, content_type=_CONTENT_TYPES[path.suffix], body=path.read_bytes())
