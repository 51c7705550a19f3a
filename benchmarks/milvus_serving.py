"""The search service on Milvus against the in-process index, on loopback: `shdh serve`'s app
with each engine under the same bounded load as benchmarks/serve_latency.py, and the writes.

    python benchmarks/milvus_serving.py [--n-items 1000000] [--clients 1 8] [--seconds 10]
        [--backends shdh faiss-repeated milvus-flat milvus-ivf] [--nlist 1024] [--quick]

The codes are serve_latency.py's: seeded random 64-bit codes in SHDH's 4-level layout (segments
21/21/22, integer weights 3/2/1), k = 100, single-code queries. The backends, each the service's
own request path in a server process of its own:
- shdh: the in-process index (`shdh serve --index`);
- faiss-repeated: faiss IndexBinaryFlat on the bit-repeated codes, in place of the loaded index
  (serve_latency.py's adapter), the exact weighted ranking at 2x the bits;
- milvus-flat / milvus-ivf: `shdh serve --engine milvus` on a Milvus standalone server (the
  `milvus` wheel's 2.3.5, started here on its own data folder) holding the same codes,
  bit-repeated, as BIN_FLAT (exact; its answers checked equal to the in-process index's) and
  then BIN_IVF_FLAT (the same collection re-indexed: nlist lists, nprobe = nlist / 16), whose
  recall@100 against the exact top 100 is measured on 200 queries.
The writes: the index step's bulk write (items a second, flush, index and load included), and
POST /items through the service, 64 codes a request, each answered once a Strong read sees it.
The Milvus server shares the machine's cores with the service and the clients. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from shdh.runtime.instruction_set import pin_cpu

pin_cpu()  # before numpy loads, as every benchmark of the project

import numpy as np  # noqa: E402
import serve_latency as sl  # noqa: E402  (benchmarks/serve_latency.py: the index, load, faiss)
from provenance import commit_line, machine_line  # noqa: E402

from shdh.core.hierarchy import LabelTree  # noqa: E402
from shdh.ranking.search_index import SearchIndex  # noqa: E402

HERE = Path(__file__).resolve()
BACKENDS = ("shdh", "faiss-repeated", "milvus-flat", "milvus-ivf")
COLLECTION = "bench"
TOKEN = "root:Milvus"


def serve(backend: str, port: int, ready: str, index_dir: str, uri: str) -> None:
    """The server process: `shdh serve`'s app on uvicorn, with the backend's index."""
    import uvicorn

    from shdh.commands.serve import SERVER_OPTIONS
    from shdh.serving import create_app
    from shdh.serving.collection_source import CollectionSource

    milvus = backend.startswith("milvus")
    source = CollectionSource(uri, TOKEN, COLLECTION, recall_sample=100) if milvus else index_dir
    app = create_app(source)
    service = app.state.service

    def put_backend() -> None:
        while service.current is None:
            if service.last_error:
                raise SystemExit(service.last_error)
            time.sleep(0.05)
        if backend == "faiss-repeated":
            adapter = sl.FaissBackend(service.current.index, repeat=True)
            service.current = replace(service.current, index=adapter)
        Path(ready).write_text("ready")

    threading.Thread(target=put_backend, daemon=True).start()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", **SERVER_OPTIONS)


def start(backend: str, work: Path, index_dir: Path, uri: str) -> tuple[subprocess.Popen, int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ready = work / f"ready-{backend}"
    ready.unlink(missing_ok=True)
    args = [sys.executable, str(HERE), "serve", backend, str(port), str(ready), str(index_dir), uri]
    proc = subprocess.Popen(args, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 1800
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the {backend} server did not become ready")
        time.sleep(0.2)
    return proc, port


def tree() -> LabelTree:
    """serve_latency.build_index's tree: the root, 8 groups, 40 classes, 200 leaves (nodes 0,
    1-8, 9-48, 49-248), so that items can be added by their label paths."""
    names = ["root", *(f"g{i}" for i in range(8)), *(f"c{i}" for i in range(40))]
    names += [f"l{i}" for i in range(200)]
    parents = [-1, *([0] * 8), *(1 + i // 5 for i in range(40)), *(9 + i // 5 for i in range(200))]
    return LabelTree(tuple(names), tuple(parents))


def label_path(leaf: int) -> str:
    return f"g{leaf // 25}/c{leaf // 5}/l{leaf}"


def write_collection(uri: str, index: SearchIndex, index_type: str, nlist: int) -> dict:
    """The codes into the collection as `shdh index --engine milvus` writes them; its time."""
    from shdh.vectordb.connection import connect
    from shdh.vectordb.writer import write_collection as write

    ancestors = np.asarray(index.ancestors)
    started = time.perf_counter()
    write(
        connect(uri, TOKEN),
        uri,
        COLLECTION,
        codes=index.packed,
        item_ids=index.item_ids.astype(np.int64),
        ancestors=ancestors,
        label_paths=[label_path(int(leaf) - 49) for leaf in ancestors[:, 3]],
        segment_sizes=index.segment_sizes,
        weights=index.weights,
        record={
            **{k: index.record[k] for k in ("method", "dataset", "encoder")},
            "tree": tree().to_dict(),
        },
        index_type=index_type,
        nlist=nlist,
    )
    seconds = time.perf_counter() - started
    return {"items": len(ancestors), "seconds": seconds, "items_per_s": len(ancestors) / seconds}


def reindex(uri: str, index_type: str, nlist: int) -> float:
    """The collection's codes under another index (released, the code's index dropped and
    built anew, the row's built if missing, loaded); the seconds it took."""
    from shdh.vectordb import schema
    from shdh.vectordb.connection import connect
    from shdh.vectordb.writer import LOAD_TIMEOUT_S

    client, started = connect(uri, TOKEN), time.perf_counter()
    client.release_collection(COLLECTION)
    indexes = client.list_indexes(COLLECTION)
    if schema.CODE in indexes:
        client.drop_index(COLLECTION, schema.CODE)
    params = schema.index_params(client, index_type, nlist, rows=schema.ROW not in indexes)
    client.create_index(COLLECTION, params)
    client.load_collection(COLLECTION, timeout=LOAD_TIMEOUT_S)
    return time.perf_counter() - started


def reused(uri: str, n_items: int) -> bool:
    """Whether the Milvus folder of --work holds the collection of the codes already (an
    earlier run's): its items added through the API removed, it is indexed as BIN_FLAT."""
    from shdh.vectordb.connection import connect

    client = connect(uri, TOKEN)
    if not client.has_collection(COLLECTION):
        return False
    client.load_collection(COLLECTION)
    client.delete(COLLECTION, filter="item_id >= 1000000000000")
    found = client.query(
        COLLECTION, filter="", output_fields=["count(*)"], consistency_level="Strong"
    )
    if found[0]["count(*)"] != n_items:
        return False
    reindex(uri, "BIN_FLAT", 1)
    return True


def recall_at_100(uri: str, index: SearchIndex, bodies: list[bytes], nprobe: int) -> float:
    """The share of the in-process index's exact top 100 that the collection returns when a
    search visits `nprobe` lists, over the first 200 query codes."""
    from shdh.vectordb.collection_index import CollectionIndex
    from shdh.vectordb.connection import connect

    collection = CollectionIndex(connect(uri, TOKEN), uri, COLLECTION, nprobe=nprobe)
    codes = np.concatenate([sl.query_code(body) for body in bodies[:200]])
    served = collection.search_codes(codes, 100).hits
    exact = index.search_codes(codes, 100)
    shares = [
        len({h.item_id for h in a} & {h.item_id for h in b}) / 100
        for a, b in zip(served, exact, strict=True)
    ]
    return float(np.mean(shares))


def search_alone_ms(backend: str, uri: str, index: SearchIndex, bodies: list[bytes]) -> float:
    """Median ms of the backend's search for one code in this process, no HTTP."""
    if backend.startswith("milvus"):
        from shdh.vectordb.collection_index import CollectionIndex
        from shdh.vectordb.connection import connect

        searcher = CollectionIndex(connect(uri, TOKEN), uri, COLLECTION)
        codes = [sl.query_code(body) for body in bodies]
        searcher.search_codes(codes[0], 100)
        times = []
        for code in codes[:200]:
            started = time.perf_counter()
            searcher.search_codes(code, 100)
            times.append(time.perf_counter() - started)
        return float(np.median(times)) * 1000
    return sl.search_alone_ms(index, backend, bodies)


def api_inserts(port: int, seconds: float, n_bits_bytes: int) -> dict:
    """POST /items of 64 random codes a request, one after another, for `seconds`."""
    import requests

    rng, url = np.random.default_rng(7), f"http://127.0.0.1:{port}"
    added, latencies, next_id = 0, [], 10**12
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        codes = rng.integers(0, 256, (64, n_bits_bytes), dtype=np.uint8)
        items = [
            {"item_id": next_id + i, "label_path": label_path(i), "code": code.tobytes().hex()}
            for i, code in enumerate(codes)
        ]
        started = time.perf_counter()
        answer = requests.post(f"{url}/items", json={"items": items}, timeout=120)
        latencies.append(time.perf_counter() - started)
        if answer.status_code != 200:
            raise SystemExit(f"POST /items: {answer.status_code} {answer.text[:300]}")
        added, next_id = added + len(items), next_id + len(items)
    p50, p99 = np.percentile(latencies, [50, 99]) * 1000
    return {"items": added, "items_per_s": added / sum(latencies), "p50_ms": p50, "p99_ms": p99}


def run_backend(backend, work, index_dir, uri, index, args) -> list[dict]:
    proc, port = start(backend, work, index_dir, uri)
    try:
        bodies = sl.request_bodies(args.n_queries)
        if backend != "milvus-ivf":  # exact: the project's top-100 distances, or it fails
            sl.check_answers(port, bodies[0], index)
        alone = search_alone_ms(backend, uri, index, bodies)
        rows = [{**row, "alone_ms": alone} for row in sl.measure(proc, port, bodies, args)]
        if backend == "milvus-flat" and args.insert_seconds > 0:
            rows[0]["api_inserts"] = api_inserts(port, args.insert_seconds, sl.BITS // 8)
        return rows
    finally:
        proc.terminate()
        proc.wait(60)


def print_table(results: dict, extra: dict) -> None:
    print(
        "\n| backend | clients | queries/s | p50 ms | p99 ms | search alone, p50 ms | "
        "CPU ms a query: server / clients | load 1 min |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for backend, rows in results.items():
        for r in rows:
            print(
                f"| {backend} | {r['clients']} | {r['qps']:,.0f} | {r['p50_ms']:.2f} | "
                f"{r['p99_ms']:.2f} | {r['alone_ms']:.2f} | "
                f"{r['server_cpu_ms']:.2f} / {r['client_cpu_ms']:.2f} | "
                f"{r['load'][0]:.1f} -> {r['load'][1]:.1f} |"
            )
    print("\n" + json.dumps(extra, indent=2))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]), *sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-items", type=int, default=1_000_000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--n-queries", type=int, default=1000)
    parser.add_argument("--nlist", type=int, default=1024, help="BIN_IVF_FLAT's lists")
    parser.add_argument("--insert-seconds", type=float, default=20.0, help="of POST /items")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--work", type=Path, help="keep the index and Milvus's data here")
    parser.add_argument(
        "--reuse", action="store_true", help="with --work: the collection an earlier run wrote"
    )
    parser.add_argument("--quick", action="store_true", help="20,000 codes, 1 s per count")
    args = parser.parse_args()
    if args.quick:
        args.n_items, args.seconds, args.warmup, args.n_queries = 20_000, 1.0, 0.5, 100
        args.nlist, args.insert_seconds = 64, 2.0
    print(f"machine: {machine_line()}")
    print(commit_line())
    print(f"{args.n_items:,} random {sl.BITS}-bit codes, k = 100, single-code queries")
    with tempfile.TemporaryDirectory(prefix="milvus-serving-") as tmp:
        run(Path(args.work or tmp), args)


def run(work: Path, args) -> None:
    sys.path.insert(0, str(HERE.parents[1]))  # tests/milvus_server.py: the server of the tests
    from tests.milvus_server import MilvusServer

    work.mkdir(parents=True, exist_ok=True)
    index_dir = work / "index"
    if not (index_dir / "index.json").exists():
        sl.build_index(index_dir, args.n_items)
    index = SearchIndex.load(index_dir)
    server = MilvusServer(work / "milvus")
    (work / "milvus").mkdir(exist_ok=True)
    results, extra = {}, {}
    milvus = [b for b in args.backends if b.startswith("milvus")]
    try:
        if milvus:
            server.start()
            if args.reuse and reused(server.uri, len(index.item_ids)):
                print("the collection of an earlier run is reused", flush=True)
            else:
                extra["bulk_write"] = write_collection(server.uri, index, "BIN_FLAT", args.nlist)
                print(f"bulk write: {extra['bulk_write']}", flush=True)
        for backend in args.backends:
            if backend == "milvus-ivf":
                extra["reindex_ivf_s"] = reindex(server.uri, "BIN_IVF_FLAT", args.nlist)
                bodies = sl.request_bodies(args.n_queries)
                extra["nlist"], extra["nprobe"] = args.nlist, max(1, args.nlist // 16)
                extra["recall_at_100"] = {  # the served nprobe (a sixteenth), then more lists
                    n: recall_at_100(server.uri, index, bodies, n)
                    for n in dict.fromkeys([extra["nprobe"], args.nlist // 4, args.nlist // 2])
                }
            print(f"\n{backend}:", flush=True)
            results[backend] = run_backend(backend, work, index_dir, server.uri, index, args)
        if milvus:
            extra["milvus_rss_mb"] = sl.memory_mb(server.process.pid)
    finally:
        server.stop(kill=True)
    for rows in results.values():
        if "api_inserts" in rows[0]:
            extra["api_inserts"] = rows[0].pop("api_inserts")
    print_table(results, extra)


if __name__ == "__main__":
    main()
