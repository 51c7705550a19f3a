"""What the serving tests share: small indexes, a stand-in image encoder, and the service run
on a real uvicorn on a loopback port (in this process, or as a process of its own when its
memory is measured)."""

from __future__ import annotations

import base64
import io
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import requests
import uvicorn
from PIL import Image

from shdh.data.dataset import Dataset, save_dataset
from shdh.ranking.exact import pack_codes
from shdh.ranking.search_index import SearchIndex, write_index
from shdh.serving import Limits, create_app

REPO = Path(__file__).resolve().parents[2]
TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SEGMENTS, WEIGHTS = (6, 5, 5), (3.0, 2.0, 1.0)  # 16 bits; integer weights make many ties
N_BITS = sum(SEGMENTS)
IMAGE_SHAPE = (8, 8, 3)
LIMITS = Limits(max_body_bytes=1 << 20, max_batch=8, max_k=50, max_image_side=256)


def make_index(folder: Path, seed: int = 0, n: int = 300, run_id: str | None = "run-a") -> Path:
    """n items with random 16-bit codes (so many exact distance ties) and a 3-level tree."""
    rng = np.random.default_rng(seed)
    codes = rng.choice(np.array([-1, 1], np.int8), size=(n, N_BITS))
    leaves = rng.integers(0, 6, n)
    ancestors = np.stack([np.zeros(n), 1 + leaves // 3, 3 + leaves], axis=1).astype(np.int32)
    item_ids = np.arange(1000, 1000 + 7 * n, 7)  # ids are not rows
    record = {
        "method": "shdh",
        "dataset": "toy",
        "encoder": {"name": "toy", "version": "1", "alias": "champion", "run_id": run_id},
    }
    return write_index(
        folder,
        codes=codes,
        item_ids=item_ids,
        ancestors=ancestors,
        segment_sizes=SEGMENTS,
        weights=WEIGHTS,
        record=record,
    )


def make_dataset(
    folder: Path, index_dir: Path, seed: int = 0, image_shape: tuple[int, ...] = IMAGE_SHAPE
) -> Path:
    """A prepare step's folder whose dataset holds the index's items (its ids), with random
    images (8x8 RGB unless told) and the label paths of their ancestors in the index
    (make_index's tree: group g at level 2 is node 1 + g, leaf l at level 3 is node 3 + l)."""
    index = SearchIndex.load(index_dir)
    ids = index.item_ids.astype(np.int64)  # held as int32 where they fit
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (len(ids), *image_shape), dtype=np.uint8)
    labels = np.array([label_path(row) for row in np.asarray(index.ancestors)])
    save_dataset(Dataset(images=images, labels=labels, ids=ids, name="toy"), folder / "dataset")
    return folder


def label_path(ancestors: np.ndarray) -> str:
    """The label path of an item of make_index's tree, from its ancestor row."""
    return f"group{ancestors[1] - 1}/leaf{ancestors[2] - 3}"


class PixelEncoder:
    """A stand-in encoder with the service's encoder interface: bit b is +1 when channel value
    b of the flattened image is above 127. Deterministic, so a test can encode the same image
    itself."""

    image_shape = IMAGE_SHAPE
    n_bits = N_BITS
    method = None  # no method's: the index's method is not checked against it
    run_id = None
    name = version = None  # no registry's: nor the index's version

    def encode(self, images: np.ndarray) -> np.ndarray:
        flat = images.reshape(len(images), -1)[:, :N_BITS].astype(np.int16)
        return pack_codes(np.where(flat > 127, 1, -1))


class PixelEncoderSource:
    """Loads a PixelEncoder; with `gate`, not before the gate is set (a slow model download)."""

    def __init__(self, gate: threading.Event | None = None, n_bits: int = N_BITS) -> None:
        self.gate = gate
        self.n_bits = n_bits

    def load(self) -> PixelEncoder:
        if self.gate is not None:
            self.gate.wait(30)
        encoder = PixelEncoder()
        encoder.n_bits = self.n_bits
        return encoder

    def describe(self) -> str:
        return "pixel encoder"

    def index_arguments(self) -> str:
        return "--model-dir pixels"  # no such folder: this stand-in is never indexed with


def png(pixels: np.ndarray, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt)
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def free_socket() -> socket.socket:
    """A listening socket on a free loopback port, declared TCP: asyncio sets TCP_NODELAY only
    on sockets whose protocol says so, and without it each response waits out the client's
    delayed ACK (40 ms)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def serving(app, ready: bool = True) -> Iterator[str]:
    """The app on uvicorn in a thread, on a free loopback port: yields its base URL."""
    sock = free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        wait_until(lambda: server.started, "the server to start")
        if ready:
            wait_until(lambda: requests.get(f"{url}/readyz", timeout=5).ok, "/readyz")
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def is_ready(url: str) -> bool:
    """Whether the service at url answers /readyz with 200 (False while it is not listening)."""
    try:
        return requests.get(f"{url}/readyz", timeout=2).ok
    except requests.ConnectionError:
        return False


def wait_until(check, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def main(index_dir: str, port_file: str) -> None:
    """The service as a process of its own (the fuzz test measures its memory): the stand-in
    encoder, the test token and limits; the bound port is written to port_file."""
    app = create_app(index_dir, encoder=PixelEncoderSource(), token=TOKEN, limits=LIMITS)
    sock = free_socket()
    Path(port_file).write_text(str(sock.getsockname()[1]))
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main(*sys.argv[1:])
