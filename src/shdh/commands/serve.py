"""shdh serve: the search service over an index folder (shdh index), on uvicorn.

    export SHDH_SERVE_TOKEN=$(openssl rand -hex 24)
    shdh serve --index data/index --model-dir artifacts/models/shdh/shdh-64   # a fit's folder
    shdh serve --index data/index --model shdh-encoder --alias champion   # the registered one
    shdh serve --index s3://shdh/serving/index --cache-dir /cache        # copied from S3
    shdh serve --engine milvus --uri http://milvus:19530 --model shdh-encoder   # a collection
    kill -HUP <pid>              # or POST /admin/reload: load the index and encoder anew

Without an encoder the service answers code and item queries only. With `--engine milvus` it
answers from the Milvus collection `shdh index --engine milvus` wrote for the same encoder (or
--collection), and takes items (POST /items, DELETE /items/{id}); the server's token comes from
$SHDH_MILVUS_TOKEN. See docs/serving.md.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from shdh.commands.common import script_main
from shdh.runtime.errors import whole_number
from shdh.tracking.model_registry import DEFAULT_ALIAS, DEFAULT_MODEL_NAME

HELP = "serve exact top-k search over an index by code, item id or image (HTTP, with /docs)"
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})

log = logging.getLogger("shdh")

# How uvicorn runs the service (benchmarks/serve_latency.py starts it the same way). The parser
# and loop are named, not left to uvicorn's "auto": without httptools and uvloop it falls back to
# its pure-Python parser and asyncio's loop silently, at a quarter fewer queries a second
# (docs/serving.md).
SERVER_OPTIONS = {"workers": 1, "http": "httptools", "loop": "uvloop"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--index",
        help="the index folder (shdh index), or s3://BUCKET/PREFIX holding one (fetched anew "
        "on every load and reload; endpoint and keys from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID...)",
    )
    parser.add_argument(
        "--cache-dir", help="with an s3:// --index: where its copy is kept (default: a temp folder)"
    )
    _add_milvus_arguments(parser)
    encoder = parser.add_mutually_exclusive_group()
    encoder.add_argument(
        "--model-dir", help="a deep method's fit folder (or its hasher/), for image queries"
    )
    encoder.add_argument(
        "--model",
        nargs="?",
        const=DEFAULT_MODEL_NAME,
        help=f"the registered encoder, for image queries (default name: {DEFAULT_MODEL_NAME})",
    )
    parser.add_argument(
        "--alias", default=DEFAULT_ALIAS, help=f"with --model (default: {DEFAULT_ALIAS})"
    )
    parser.add_argument(
        "--images",
        help="the prepare step's folder (data.prepared_dir): the page's thumbnails and every "
        "hit's label path",
    )
    parser.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1 (this machine)")
    parser.add_argument("--port", type=whole_number(1, 65535), default=8000, help="default: 8000")
    parser.add_argument(
        "--token-file", help="a file holding the bearer token (else $SHDH_SERVE_TOKEN)"
    )
    parser.add_argument(
        "--no-token",
        action="store_true",
        help="serve without a token (refused unless --host is a loopback address)",
    )
    _add_limit_arguments(parser)


def _add_milvus_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=("memory", "milvus"),
        default="memory",
        help="memory: the index folder in this process (default); milvus: a Milvus collection",
    )
    parser.add_argument(
        "--uri", help="with milvus: a Milvus Lite file or a server's http(s)://HOST:PORT"
    )
    parser.add_argument(
        "--collection",
        help="with milvus: the collection (default: the one `shdh index` named for the encoder)",
    )
    parser.add_argument(
        "--nprobe",
        type=whole_number(1),
        help="with milvus and BIN_IVF_FLAT: lists a search visits (default: a sixteenth)",
    )
    parser.add_argument(
        "--recall-sample",
        type=whole_number(0),
        default=100,
        help="with BIN_IVF_FLAT: items whose queries measure the recall at each load (0: none)",
    )


def _add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    from shdh.serving import Limits

    defaults = Limits()
    for field, what in (
        ("max_body_bytes", "bytes in a request body"),
        ("max_batch", "queries in one request"),
        ("max_k", "hits per query"),
        ("max_image_side", "pixels along an image side"),
        ("max_image_pixels", "pixels in an image"),
    ):
        flag = "--" + field.replace("_", "-")
        default = getattr(defaults, field)
        parser.add_argument(
            flag, type=whole_number(1), default=default, help=f"{what} (default: {default})"
        )


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from shdh.serving import HasherFolder, Limits, RegisteredModel, create_app
    from shdh.serving.auth import TOKEN_ENV, read_token
    from shdh.serving.thumbnails import DatasetImages

    token = None if args.no_token else read_token(args.token_file)
    if args.no_token and args.host not in LOOPBACK:
        raise ValueError(f"--no-token: refused on --host {args.host}; only on a loopback address")
    if token is None and not args.no_token:
        raise ValueError(f"no token: set {TOKEN_ENV} or --token-file (or --no-token on loopback)")
    encoder = None
    if args.model_dir:
        encoder = HasherFolder(args.model_dir)
    elif args.model:
        encoder = RegisteredModel(args.model, args.alias)
    limits = Limits(**{field: getattr(args, field) for field in Limits.__dataclass_fields__})
    images = DatasetImages(args.images) if args.images else None
    source = _index(args)
    app = create_app(source, encoder=encoder, token=token, limits=limits, images=images)
    _reload_on_sighup(app.state.service)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", **SERVER_OPTIONS)
    return 0


def _index(args: argparse.Namespace):
    """The in-process index's folder (or S3 prefix), or the Milvus collection."""
    from shdh.serving.collection_source import CollectionSource
    from shdh.serving.index_source import index_source

    if args.engine == "memory":
        if args.uri or args.collection or args.nprobe:
            raise ValueError("--uri, --collection and --nprobe: only with --engine milvus")
        if not args.index:
            raise ValueError("--index: required (or --engine milvus with --uri)")
        return index_source(args.index, args.cache_dir)
    if args.index or args.cache_dir:
        raise ValueError("--index and --cache-dir: not with --engine milvus (give --uri)")
    if not args.uri:
        raise ValueError("--engine milvus: give --uri (a Milvus Lite file or http://HOST:19530)")
    if not (args.collection or args.model or args.model_dir):
        raise ValueError(
            "--engine milvus: the collection is named for the encoder; without one "
            "(--model or --model-dir), give --collection"
        )
    return CollectionSource(
        args.uri, collection=args.collection, nprobe=args.nprobe, recall_sample=args.recall_sample
    )


def _reload_on_sighup(service) -> None:
    """SIGHUP loads the index and encoder anew, as POST /admin/reload does (in a thread: a
    signal handler must return at once)."""

    def reload_in_thread(signum, frame) -> None:
        log.info("SIGHUP: reloading the index and the encoder")
        threading.Thread(target=_reload_logged, args=(service,), daemon=True).start()

    signal.signal(signal.SIGHUP, reload_in_thread)


def _reload_logged(service) -> None:
    try:
        service.reload()
    except Exception as exc:  # the old version keeps serving; Service.reload logged the cause
        log.error("reload failed, the previous index and encoder keep serving: %s", exc)


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
