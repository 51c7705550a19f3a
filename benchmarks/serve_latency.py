"""Search service latency on loopback: `shdh serve`'s app under a bounded load, with the
project's ranking and, through the same HTTP layer, faiss IndexBinaryFlat.

Targets (issue's setting: 1,000,000 x 64-bit codes, k = 100, single-code queries, 2 cores):
p99 <= 5 ms at 1 client, >= 800 queries/s at 8 clients, the server's memory <= 2x the packed
codes plus the encoder (no encoder here: code queries only).

    python benchmarks/serve_latency.py [--n-items 1000000] [--clients 1 8 32] [--seconds 10]
        [--warmup 3] [--backends shdh faiss-repeated faiss-plain] [--quick]

The index is synthetic: seeded random codes in the layout SHDH makes at 64 bits on a 4-level
tree (segments 21/21/22, Eq. 2's weights 1/2, 1/3, 1/6), written by `write_index`. Each
backend's server is a process of its own (its memory is read from /proc), started as
`shdh serve` starts it (uvicorn.run with its SERVER_OPTIONS). Every backend answers through the
same app and request path: a faiss backend is an adapter with SearchIndex's `rank_codes`,
`hit_arrays` and `search_codes` put in place of the loaded index once the app has loaded it (the one
reference a reload replaces), so only the search differs. faiss on the bit-repeated codes (each
segment's bits repeated w_k times for the integer weights 3/2/1: exact weighted distances, at
2x the bits) must give the project's top-k distances, or the script fails; faiss on the plain
codes ranks by plain Hamming.

The load: C clients, each a process of its own with one keep-alive connection and a blocking
socket, sending a request as soon as the last one is answered, for the warm-up and then for the
measured seconds; a latency is counted when its request started inside the measured window.
The clients share the machine's cores with the server, so each row also gives the CPU time a
query took in the server and in the clients (from /proc and the clients' rusage): what the
clients take from the server. Not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import BinaryIO

import numpy as np
from provenance import commit_line, machine_line  # benchmarks/provenance.py

from shdh.core import level_weights
from shdh.ranking.exact import integer_weights
from shdh.ranking.search_index import Hit, SearchIndex, as_packed, write_index

HERE = Path(__file__).resolve()
LEVELS, BITS = 4, 64
BACKENDS = ("shdh", "faiss-repeated", "faiss-plain")


def layout() -> tuple[list[int], list[float]]:
    """The segments and float weights (Eq. 2) SHDH makes at 64 bits on a 4-level tree."""
    sizes = level_weights.segment_sizes(BITS, LEVELS)
    levels = np.asarray(level_weights.segment_levels(LEVELS))
    weights = level_weights.layer_weights(LEVELS)[levels - 1]
    return sizes, [float(w) for w in weights]


def build_index(folder: Path, n: int, seed: int = 0) -> Path:
    """n random 64-bit codes (every bit fair and independent) on a random 4-level tree (root,
    8 groups, 40 classes, 200 leaves)."""
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, size=(n, BITS // 8), dtype=np.uint8)
    leaf = rng.integers(0, 200, n)
    ancestors = np.stack([np.zeros(n, np.int64), 1 + leaf // 25, 9 + leaf // 5, 49 + leaf], 1)
    sizes, weights = layout()
    encoder = {"name": "none (random codes)", "version": "-", "alias": "-", "run_id": None}
    record = {"method": "shdh", "dataset": f"synthetic-{n}", "encoder": encoder}
    return write_index(
        folder,
        codes=packed,
        item_ids=np.arange(n, dtype=np.int64),
        ancestors=ancestors.astype(np.int32),
        segment_sizes=sizes,
        weights=weights,
        record=record,
    )


def repeated_bits(packed: np.ndarray, sizes: list[int], int_weights: np.ndarray) -> np.ndarray:
    """Each segment's bits repeated w_k times, zero-padded to whole bytes: their plain Hamming
    distance is the integer weighted distance of Eq. 4."""
    n_bits = int(sum(sizes))
    bits = np.unpackbits(packed, axis=1)[:, :n_bits]
    wide = np.repeat(bits, np.repeat(int_weights, sizes), axis=1)
    return np.packbits(wide, axis=1)


class FaissBackend:
    """SearchIndex's `rank_codes`, `hit_arrays` and `search_codes` (and what the app's version
    line reads) over a faiss IndexBinaryFlat, on the bit-repeated codes (`repeat`) or on the
    plain ones. Keeps the item ids, not the index's other arrays, so the server's memory is
    faiss's plus the ids."""

    def __init__(self, index: SearchIndex, repeat: bool) -> None:
        import faiss

        self.record = {**index.record, "method": f"faiss-{'repeated' if repeat else 'plain'}"}
        self.n_bits = index.n_bits
        self.item_ids = index.item_ids
        self.sizes = list(index.segment_sizes)
        self.int_weights = integer_weights(index.weights) if repeat else None
        # An integer weighted distance times this is Eq. 4's float distance.
        self.scale = index.weights[0] / self.int_weights[0] if repeat else 1.0
        db = self._codes(index.packed)
        self.faiss = faiss.IndexBinaryFlat(db.shape[1] * 8)
        self.faiss.add(db)

    def _codes(self, packed: np.ndarray) -> np.ndarray:
        if self.int_weights is None:
            return packed
        return repeated_bits(packed, self.sizes, self.int_weights)

    def rank_codes(self, q_packed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        distances, rows = self.faiss.search(self._codes(q_packed), k)
        return rows, distances

    def hit_arrays(self, rows: np.ndarray, distances: np.ndarray, query_anc=None) -> tuple:
        return self.item_ids[rows], distances * self.scale, np.zeros(len(rows), np.int64)

    def search_codes(self, codes: np.ndarray, k: int) -> list[list[Hit]]:
        rows, distances = self.rank_codes(as_packed(codes, self.n_bits), k)
        return [
            [Hit(int(i), float(d), int(s)) for i, d, s in zip(*self.hit_arrays(r, ds), strict=True)]
            for r, ds in zip(rows, distances, strict=True)
        ]


def serve(index_dir: str, backend: str, port: int, ready_file: str) -> None:
    """The server process: `shdh serve`'s app and uvicorn call; ready_file appears once the
    backend answers."""
    import uvicorn

    from shdh.commands.serve import SERVER_OPTIONS
    from shdh.serving import create_app

    app = create_app(index_dir)
    service = app.state.service

    def put_backend() -> None:
        while service.current is None:
            if service.last_error:
                raise SystemExit(service.last_error)
            time.sleep(0.05)
        if backend != "shdh":
            loaded = service.current
            adapter = FaissBackend(loaded.index, repeat=backend == "faiss-repeated")
            service.current = replace(loaded, index=adapter)
        Path(ready_file).write_text("ready")

    threading.Thread(target=put_backend, daemon=True).start()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", **SERVER_OPTIONS)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(index_dir: Path, backend: str, work: Path) -> tuple[subprocess.Popen, int]:
    port, ready = free_port(), work / f"ready-{backend}"
    ready.unlink(missing_ok=True)
    args = [sys.executable, str(HERE), "serve", str(index_dir), backend, str(port), str(ready)]
    # One thread per query for every backend: faiss would otherwise start an OpenMP team per
    # search in each of the server's worker threads, on the cores the clients also need.
    proc = subprocess.Popen(args, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 600
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the {backend} server did not become ready")
        time.sleep(0.1)
    return proc, port


def memory_mb(pid: int) -> dict[str, float]:
    """The process's resident memory now (VmRSS) and at its peak (VmHWM), in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {key: int(fields[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM")}


def request_bodies(n: int, seed: int = 1) -> list[bytes]:
    """n single-code top-100 queries, random codes as hex."""
    codes = np.random.default_rng(seed).integers(0, 256, size=(n, BITS // 8), dtype=np.uint8)
    return [json.dumps({"codes": [row.tobytes().hex()], "k": 100}).encode() for row in codes]


def query_code(body: bytes) -> np.ndarray:
    """A request body's one code, packed (1, 8)."""
    return np.frombuffer(bytes.fromhex(json.loads(body)["codes"][0]), np.uint8)[None]


def http_request(port: int, body: bytes) -> bytes:
    head = (
        f"POST /search/codes HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def read_response(stream: BinaryIO) -> tuple[int, bytes]:
    """One HTTP/1.1 response from a buffered socket file: (status, body)."""
    status = int(stream.readline().split()[1])
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, stream.read(length)


def client(port: int, requests: list[bytes], start: float, end: float, results: Connection) -> None:
    """One client process: back-to-back requests on one keep-alive connection until `end`;
    sends back the latencies (s) of those started at or after `start`, and how many were
    answered in all (warm-up included)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream = sock.makefile("rb")
        latencies, answered = [], 0
        i = int.from_bytes(os.urandom(2), "little")
        while (sent := time.perf_counter()) < end:
            sock.sendall(requests[i % len(requests)])
            status, body = read_response(stream)
            if status != 200:
                raise SystemExit(f"HTTP {status}: {body[:300]!r}")
            if sent >= start:
                latencies.append(time.perf_counter() - sent)
            answered += 1
            i += 1
    results.send((latencies, answered))


def load(port: int, requests: list[bytes], clients: int, warmup: float, seconds: float):
    """(latencies (s) of the measured window, queries answered in all, the clients' CPU
    seconds). Each client is a process of its own with a blocking socket: a few system calls
    and a little Python per request, and no share of the server's or each other's GIL."""
    context = multiprocessing.get_context("fork")
    start = time.perf_counter() + warmup
    cpu_before = _children_cpu()
    pipes, procs = [], []
    for _ in range(clients):
        receive, send = context.Pipe(duplex=False)
        procs.append(
            context.Process(target=client, args=(port, requests, start, start + seconds, send))
        )
        pipes.append(receive)
    for proc in procs:
        proc.start()
    answers = [pipe.recv() for pipe in pipes]
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise SystemExit(f"a client failed (exit code {proc.exitcode})")
    latencies = np.asarray([t for times, _ in answers for t in times])
    return latencies, sum(n for _, n in answers), _children_cpu() - cpu_before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_seconds(pid: int) -> float:
    """A process's user and system CPU seconds so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def check_answers(port: int, body: bytes, index: SearchIndex) -> None:
    """One query's answer has k hits; with an exact backend its distances are the project's."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(http_request(port, body))
        status, raw = read_response(sock.makefile("rb"))
    answer = json.loads(raw)
    hits = answer["results"][0]["hits"]
    query = json.loads(body)
    expected = index.search_codes(query_code(body), query["k"])[0]
    if status != 200 or len(hits) != query["k"]:
        raise SystemExit(f"bad answer: HTTP {status}, {len(hits)} hits")
    if answer["version"]["method"] != "faiss-plain":
        got = [h["distance"] for h in hits]
        if not np.allclose(got, [h.distance for h in expected], rtol=0, atol=1e-9):
            raise SystemExit(f"{answer['version']['method']}: top-k distances differ")


def measure(proc: subprocess.Popen, port: int, bodies: list[bytes], args) -> list[dict]:
    """One row per client count: queries/s, p50 and p99 (ms), the server's memory and the
    1-minute load average before and after."""
    requests = [http_request(port, body) for body in bodies]
    rows = []
    for clients in args.clients:
        load_before = os.getloadavg()[0]
        server_before = cpu_seconds(proc.pid)
        latencies, answered, client_cpu = load(port, requests, clients, args.warmup, args.seconds)
        server_cpu = cpu_seconds(proc.pid) - server_before
        p50, p99 = np.percentile(latencies, [50, 99]) * 1000
        row = {
            "clients": clients,
            "queries": len(latencies),
            "qps": len(latencies) / args.seconds,
            "p50_ms": p50,
            "p99_ms": p99,
            **memory_mb(proc.pid),
            # CPU per answered query, warm-up included in both counts (ms)
            "server_cpu_ms": server_cpu / answered * 1000,
            "client_cpu_ms": client_cpu / answered * 1000,
            "load": (load_before, os.getloadavg()[0]),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def search_alone_ms(index: SearchIndex, backend: str, bodies: list[bytes]) -> float:
    """Median ms of the backend's search_codes for one code, called in this process with no
    HTTP: what the service adds is the rest of a request's latency."""
    import faiss

    faiss.omp_set_num_threads(1)  # as in the servers (OMP_NUM_THREADS=1)
    searcher = index if backend == "shdh" else FaissBackend(index, backend == "faiss-repeated")
    codes = [query_code(body) for body in bodies]
    searcher.search_codes(codes[0], 100)  # first-call costs
    times = []
    for code in codes[:200]:
        start = time.perf_counter()
        searcher.search_codes(code, 100)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1000


def run_backend(index_dir: Path, backend: str, work: Path, args, index: SearchIndex) -> list[dict]:
    proc, port = start_server(index_dir, backend, work)
    try:
        bodies = request_bodies(args.n_queries)
        check_answers(port, bodies[0], index)
        alone = search_alone_ms(index, backend, bodies)
        return [{**row, "alone_ms": alone} for row in measure(proc, port, bodies, args)]
    finally:
        proc.terminate()
        proc.wait(30)


def baseline_memory(work: Path, backend: str) -> dict[str, float]:
    """The backend's server with a 1,000-item index after a second of queries: the
    interpreter, FastAPI, numpy and the backend's libraries, which the index comes on top of."""
    index_dir = work / "index-1000"
    if not index_dir.exists():
        build_index(index_dir, 1000)
    proc, port = start_server(index_dir, backend, work)
    try:
        requests = [http_request(port, body) for body in request_bodies(50)]
        load(port, requests, 1, 0.0, 1.0)
        return memory_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)


def print_table(results: dict[str, list[dict]], packed_mb: float, bases: dict) -> None:
    print(f"\npacked codes: {packed_mb:.1f} MB")
    for backend, base in bases.items():
        print(f"{backend} server with a 1,000-item index: RSS {base['VmRSS']:.0f} MB")
    print(
        "\n| backend | clients | queries/s | p50 ms | p99 ms | search alone, p50 ms | "
        "CPU ms a query: server / clients | RSS MB (peak) | "
        "RSS over the 1,000-item server, x packed codes | load 1 min |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for backend, rows in results.items():
        for r in rows:
            extra = (r["VmRSS"] - bases[backend]["VmRSS"]) / packed_mb
            print(
                f"| {backend} | {r['clients']} | {r['qps']:,.0f} | {r['p50_ms']:.2f} | "
                f"{r['p99_ms']:.2f} | {r['alone_ms']:.2f} | "
                f"{r['server_cpu_ms']:.2f} / {r['client_cpu_ms']:.2f} | "
                f"{r['VmRSS']:.0f} ({r['VmHWM']:.0f}) | "
                f"{extra:.1f} | {r['load'][0]:.1f} -> {r['load'][1]:.1f} |"
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(*sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-items", type=int, default=1_000_000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured, per client count")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before each count")
    parser.add_argument("--n-queries", type=int, default=1000, help="distinct query codes")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--index-dir", type=Path, help="reuse (or write) the index here")
    parser.add_argument("--quick", action="store_true", help="20,000 codes, 1 s per count")
    args = parser.parse_args()
    if args.quick:
        args.n_items, args.seconds, args.warmup, args.n_queries = 20_000, 1.0, 0.5, 100

    print(f"machine: {machine_line()}")
    print(commit_line())
    sizes, weights = layout()
    print(
        f"{args.n_items:,} random {BITS}-bit codes, segments {sizes}, weights "
        f"{[round(w, 4) for w in weights]}, k = 100, single-code queries; {args.warmup:g} s "
        f"warm-up, {args.seconds:g} s measured per client count; clients and server share "
        f"{os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory(prefix="serve-latency-") as tmp:
        work = Path(tmp)
        index_dir = args.index_dir or work / "index"
        if not (index_dir / "index.json").exists():
            build_index(index_dir, args.n_items)
        index = SearchIndex.load(index_dir)
        packed_mb = index.packed.nbytes / 2**20
        results = {}
        for backend in args.backends:
            print(f"\n{backend}:", flush=True)
            results[backend] = run_backend(index_dir, backend, work, args, index)
        del index
        bases = {backend: baseline_memory(work, backend) for backend in args.backends}
        print_table(results, packed_mb, bases)


if __name__ == "__main__":
    main()
