"""The HTTP application: its routes, and `create_app`, which wires the service's state, the
token and the limits around them.

Search handlers run in the server's thread pool (the ranking kernel and the encoder release the
GIL for most of their work), each answering from the one `Loaded` it read at its start. Every
refusal is a 4xx with a JSON {"detail": reason}; an unexpected failure is a 500 that names no
internals (the log has the traceback).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import APIRouter, FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.routing import Mount, Route

from shdh.serving import queries, searching
from shdh.serving.api_docs import add_docs
from shdh.serving.auth import BearerAuth, carries_token
from shdh.serving.batching import CodeBatcher
from shdh.serving.collection_source import CollectionSource
from shdh.serving.encoders import EncoderSource
from shdh.serving.item_writes import item_writes
from shdh.serving.limits import BodyLimit, Limits
from shdh.serving.page import PAGE
from shdh.serving.prometheus import (
    CONTENT_TYPE,
    MetricsMiddleware,
    RequestMetrics,
    RouteLabels,
    service_lines,
)
from shdh.serving.queries import CodeQuery, IdQuery, ImageBatch, QueryError, SearchOut
from shdh.serving.state import Service
from shdh.serving.thumbnails import DatasetImages
from shdh.serving.uploads import CONTENT_TYPES, UploadError, decode_upload

log = logging.getLogger(__name__)

_IMAGE_BODY = {
    "requestBody": {
        "required": True,
        "content": {t: {"schema": {"type": "string", "format": "binary"}} for t in CONTENT_TYPES},
    }
}


def create_app(
    index_dir: str | Path | CollectionSource,
    encoder: EncoderSource | None = None,
    token: str | None = None,
    limits: Limits | None = None,
    images: DatasetImages | None = None,
) -> FastAPI:
    """The service over the index in `index_dir` (or the Milvus collection of a
    CollectionSource), with image queries when `encoder` is given;
    every route but the probes, the docs and the page needs `token` when one is given; `images`
    (the prepared dataset) serves the database's images for the page's thumbnails and gives
    the answers their label paths. The index and encoder load in the background once the
    server starts (see /readyz)."""
    limits = limits or Limits()
    service = Service(index_dir, encoder, images)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.load_in_background()
        yield

    app = FastAPI(
        title="shdh search",
        description="Exact weighted-Hamming top-k search over the hash codes of a database. "
        "Send `Authorization: Bearer <token>` on every route but /, /healthz, /readyz, /docs "
        "and /redoc.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's pages load Swagger UI and ReDoc from a CDN: add_docs's do not
        redoc_url=None,
    )
    add_docs(app)
    app.state.service = service  # shdh serve reloads it on SIGHUP
    metrics = RequestMetrics()
    by_codes = _codes_endpoint(service, limits)
    routers = [
        _probes(service, token),
        _metrics_route(service, metrics),
        _search_routes(service, limits, by_codes),
        _item_routes(service),
        item_writes(service, limits),
    ]
    for router in routers:
        app.include_router(router)
    # The hot path also as a plain Starlette route ahead of FastAPI's: the same handler (it
    # parses its own body and writes its own Response) without FastAPI's per-request
    # dependency solving; FastAPI's route stays for the OpenAPI docs. The token and the body
    # limit are middleware and the exception handlers the app's, so both answer the same.
    app.router.routes.insert(0, Route("/search/codes", by_codes, methods=["POST"]))
    app.exception_handler(RequestValidationError)(_invalid)
    app.exception_handler(QueryError)(_refused)
    app.exception_handler(UploadError)(_refused)
    app.exception_handler(Exception)(_internal_error)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    if token is not None:
        app.add_middleware(BearerAuth, token=token)
    labels = RouteLabels(_templates(app, routers))
    app.add_middleware(MetricsMiddleware, metrics=metrics, labels=labels)  # runs first: sees 401s
    return app


def _templates(app: FastAPI, routers: list[APIRouter]) -> list[str]:
    """Every route's path template, the API docs' pages and assets included: a request is
    labelled by the route it reached, and "other" only where it reached none. (The app lists
    an included router as one entry without a path: its routes come from the router.)"""
    routes = [*app.routes, *(route for router in routers for route in router.routes)]
    return [
        f"{route.path}/{{path:path}}" if isinstance(route, Mount) else route.path
        for route in routes
        if hasattr(route, "path")
    ]


def _metrics_route(service: Service, metrics: RequestMetrics) -> APIRouter:
    router = APIRouter(dependencies=[Security(HTTPBearer(auto_error=False))])

    @router.get("/metrics", response_class=Response, summary="counters for Prometheus")
    def prometheus() -> Response:
        text = "\n".join([*metrics.lines(), *service_lines(service)]) + "\n"
        return Response(text, media_type=CONTENT_TYPE)

    return router


def _probes(service: Service, token: str | None) -> APIRouter:
    router = APIRouter()

    @router.get("/healthz", summary="the process is alive")
    def healthz() -> dict[str, str]:
        return {"status": "alive"}

    @router.get(
        "/readyz",
        summary="200 once the index (and the encoder, if any) are loaded; why not, with the token",
    )
    def readyz(request: Request) -> JSONResponse:
        loaded = service.current
        if loaded is None:
            reason = service.not_ready_reason()
            # The probe is open (the kubelet sends no token), but a load error names files, S3
            # prefixes and registry versions: only a caller with the token reads it.
            if not carries_token(request.headers.get("authorization", "").encode(), token):
                reason = "send the bearer token for the reason"
            return JSONResponse({"detail": f"not ready: {reason}"}, status_code=503)
        return JSONResponse({"status": "ready", "version": loaded.describe()})

    @router.get("/", include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(PAGE)

    return router


def _codes_endpoint(service: Service, limits: Limits):
    """POST /search/codes: concurrent queries ranked in batches (shdh.serving.batching)."""
    batcher = CodeBatcher(max_queries=limits.max_batch)

    async def by_codes(request: Request) -> Response:
        body = queries.parse(CodeQuery, await request.body())
        loaded = searching.served(service)
        queries.check_request(len(body.codes), body.k, limits)
        packed = queries.code_rows(body.codes, loaded.index.n_bits)
        if loaded.engine != "memory":  # the collection's own batches, in the thread pool
            found = await run_in_threadpool(searching.by_codes, loaded, packed, body.k)
            return queries.json_response(searching.answer(loaded, found))
        rows, distances = await batcher.rank(loaded.index, packed, body.k)
        return queries.code_answer(loaded.describe(), loaded.index, rows, distances, loaded.labels)

    return by_codes


def _search_routes(service: Service, limits: Limits, by_codes) -> APIRouter:
    router = APIRouter(dependencies=[Security(HTTPBearer(auto_error=False))])
    router.post(
        "/search/codes",
        response_model=SearchOut,
        openapi_extra=_json_body(CodeQuery),
        summary="top k of codes",
    )(by_codes)

    @router.post("/search/ids", response_model=SearchOut, summary="top k of database items")
    def by_ids(body: IdQuery) -> dict[str, Any]:
        loaded = searching.served(service)
        queries.check_request(len(body.ids), body.k, limits)
        return searching.answer(loaded, searching.by_ids(loaded, body.ids, body.k), body.ids)

    @router.post(
        "/search/image",
        response_model=SearchOut,
        openapi_extra=_IMAGE_BODY,
        summary="top k of one PNG or JPEG image, sent as the body",
    )
    async def by_image(request: Request, k: int = queries.DEFAULT_K) -> dict[str, Any]:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind not in CONTENT_TYPES:
            raise QueryError(415, f"Content-Type {kind or '(none)'}: send image/png or image/jpeg")
        data = await request.body()
        return await run_in_threadpool(_image_answer, service, limits, {"image": data}, k)

    @router.post(
        "/search/images",
        response_model=SearchOut,
        summary="top k of a batch of base64 PNG or JPEG images",
    )
    def by_images(body: ImageBatch) -> dict[str, Any]:
        datas = {
            f"images[{i}]": queries.decode_base64(text, f"images[{i}]")
            for i, text in enumerate(body.images)
        }
        return _image_answer(service, limits, datas, body.k)

    @router.post("/admin/reload", summary="load the index and encoder anew, then switch to them")
    def reload() -> dict[str, Any]:
        try:
            loaded = service.reload()
        except Exception as exc:
            old = service.current
            still = "nothing" if old is None else f"generation {old.generation}"
            raise QueryError(409, f"reload failed, still serving {still}: {exc}") from None
        return {"status": "reloaded", "version": loaded.describe()}

    return router


def _json_body(model: type) -> dict[str, Any]:
    """The OpenAPI request body of a route that parses its JSON body itself."""
    schema = {"schema": model.model_json_schema()}
    return {"requestBody": {"required": True, "content": {"application/json": schema}}}


def _item_routes(service: Service) -> APIRouter:
    router = APIRouter(dependencies=[Security(HTTPBearer(auto_error=False))])

    @router.get(
        "/items/{item_id}/image",
        response_class=Response,
        responses={200: {"content": {"image/png": {}}}},
        summary="a database item's image (PNG), when the service was given the dataset",
    )
    def item_image(item_id: int) -> Response:
        images = searching.served(service).images
        if images is None:
            raise QueryError(404, "no database images: start the service with --images")
        try:
            return Response(images.png(item_id), media_type="image/png")
        except KeyError as exc:
            raise QueryError(404, str(exc.args[0])) from None

    return router


def _image_answer(
    service: Service,
    limits: Limits,
    datas: dict[str, bytes],
    k: int,
) -> dict[str, Any]:
    loaded = searching.served(service)
    if loaded.encoder is None:
        raise QueryError(
            409,
            "this service has no image encoder (start it with --model-dir or --model and --alias)",
        )
    queries.check_request(len(datas), k, limits)
    shape = loaded.encoder.image_shape
    images = np.stack([decode_upload(data, name, shape, limits) for name, data in datas.items()])
    packed = loaded.encoder.encode(images)
    return searching.answer(loaded, searching.by_codes(loaded, packed, k))


async def _refused(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=exc.status)


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 naming each field and its problem. FastAPI's own handler also echoes the input,
    which fails on a body of bytes that are not UTF-8 (a 500) and would send a large bad body
    back to its sender."""
    errors = [
        {
            "loc": [str(part) for part in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in exc.errors()
    ]
    return JSONResponse({"detail": errors}, status_code=422)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"detail": "internal error"}, status_code=500)
