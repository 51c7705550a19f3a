"""The API's documentation pages, /docs (Swagger UI) and /redoc, with their scripts, styles and
icon served by the service itself from the copies the fastapi-offline package installs.

Why not FastAPI's own pages: they load Swagger UI and ReDoc from a CDN (and ReDoc's fonts from
Google), so where the service has no internet, as inside a cluster, /docs is a blank page. The
pages name every file by a path of this service, under its root path when it runs behind a
prefix, so a browser that reaches the service reaches its docs.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS = "/docs"
REDOC = "/redoc"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"
ASSETS = "/docs/assets"  # swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js, favicon.png
PAGES = frozenset({DOCS, REDOC, OAUTH2_REDIRECT})
# Swagger UI would otherwise ask validator.swagger.io to check the schema (an outside request).
SWAGGER_PARAMETERS = {"validatorUrl": None}


def assets_folder() -> Path:
    """Where the installed package keeps the files (a folder of the installed package)."""
    return Path(str(files("fastapi_offline") / "static"))


def add_docs(app: FastAPI) -> None:
    """/docs, /redoc and the files they load; create the app with docs_url=None and
    redoc_url=None so that FastAPI's CDN pages are not routed first."""
    app.mount(ASSETS, StaticFiles(directory=assets_folder()), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get(DOCS, include_in_schema=False)
    def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=root + OAUTH2_REDIRECT,
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        )

    @app.get(OAUTH2_REDIRECT, include_in_schema=False)
    def swagger_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC, include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
