"""Where the collection lives: a Milvus Lite file on this machine, or a Milvus server (standalone
or a cluster's proxy) at http(s)://HOST:PORT, with its token ("user:password" when the server
asks for a login, from $SHDH_MILVUS_TOKEN unless given).

The same `pymilvus.MilvusClient` talks to both, so the index step, the service and the tests
run the same code against a file and against a server.
"""

from __future__ import annotations

import os
import sys
import time
import types
from pathlib import Path
from typing import Any

TOKEN_ENV = "SHDH_MILVUS_TOKEN"
SERVER_SCHEMES = ("http://", "https://")
# Seconds to wait for a server to answer its first call, retried: one that has just started
# (or restarted) passes its health check before its proxy serves. A call that needs longer
# (loading a large collection) passes its own timeout.
CONNECT_TIMEOUT_S = 60.0


class VectorStoreError(RuntimeError):
    """The vector database refused or could not do what was asked; the message names the
    URI (never the token), the collection and the reason."""


def is_server(uri: str) -> bool:
    return str(uri).startswith(SERVER_SCHEMES)


def describe(uri: str, collection: str | None = None) -> str:
    """The URI as errors and logs name it: a server's address without any user:password in it,
    a file's path, and the collection."""
    where = str(uri)
    if is_server(where) and "@" in where:
        scheme, _, rest = where.partition("://")
        where = f"{scheme}://{rest.rpartition('@')[2]}"
    return where if collection is None else f"{where} collection {collection}"


def connect(uri: str, token: str | None = None) -> Any:
    """A MilvusClient for `uri`: a server's http(s):// address, or the path of a Milvus Lite
    file (its folder is created). `token` defaults to $SHDH_MILVUS_TOKEN."""
    from pymilvus import MilvusClient
    from pymilvus.exceptions import MilvusException

    if token is None:
        token = os.environ.get(TOKEN_ENV, "")
    if is_server(uri):
        target = str(uri)
    else:
        path = Path(uri)
        if path.is_dir():
            raise VectorStoreError(f"{uri}: a folder; give a Milvus Lite file (e.g. index.db)")
        path.parent.mkdir(parents=True, exist_ok=True)
        _let_milvus_lite_import()
        target, token = str(path), ""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:  # a server that is starting (a pod beside it, a restart) refuses for a while
        try:
            client = MilvusClient(uri=target, token=token, timeout=CONNECT_TIMEOUT_S)
            client.list_collections()
            return client
        except Exception as exc:  # pymilvus's, grpc's and milvus-lite's own errors
            refused = _refused_login(exc)
            if refused is not None:
                raise VectorStoreError(
                    f"{describe(uri)}: the server refused the token ({TOKEN_ENV}): {refused}"
                ) from None
            reason = exc.message if isinstance(exc, MilvusException) else str(exc)
        if time.monotonic() > deadline:
            raise VectorStoreError(f"{describe(uri)}: cannot connect: {reason}")
        time.sleep(1.0)


def _refused_login(exc: BaseException) -> str | None:
    """The server's reason when the error (or one it was raised from) is gRPC's
    UNAUTHENTICATED, which pymilvus reports as a connection failure; None otherwise."""
    import grpc

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.UNAUTHENTICATED:
            return exc.details()
        exc = exc.__cause__ or exc.__context__
    return None


def _let_milvus_lite_import() -> None:
    """milvus-lite 2.5.1 (the last with BINARY_VECTOR: 3.x refuses it) reads its own version
    with pkg_resources, which setuptools 81 removed; its engine needs nothing else from it.
    Where pkg_resources is missing, a module with those two names stands in for it."""
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        import importlib.metadata

        class DistributionNotFound(Exception):
            pass

        def get_distribution(name: str) -> Any:
            try:
                return types.SimpleNamespace(version=importlib.metadata.version(name))
            except importlib.metadata.PackageNotFoundError:
                raise DistributionNotFound(name) from None

        stand_in = types.ModuleType("pkg_resources")
        stand_in.DistributionNotFound = DistributionNotFound
        stand_in.get_distribution = get_distribution
        sys.modules.setdefault("pkg_resources", stand_in)
