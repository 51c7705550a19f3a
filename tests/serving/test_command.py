"""`shdh serve` itself: the token rules, the encoder sources, and the command serving an index
as a process of its own that reloads on SIGHUP."""

from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np
import pytest
import requests

from shdh.cli import build_parser
from shdh.commands import serve
from shdh.hashers.itq import ITQ
from shdh.serving import HasherFolder
from shdh.serving.auth import TOKEN_ENV, read_token
from tests.serving.server import REPO, free_socket, is_ready, make_index, wait_until


def run_serve(*argv: str) -> int:
    return serve.run(build_parser().parse_args(["serve", *argv]))


def test_a_token_is_required_and_no_token_is_for_loopback_only(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(ValueError, match=f"no token: set {TOKEN_ENV} or --token-file"):
        run_serve("--index", str(tmp_path))
    with pytest.raises(ValueError, match="--no-token: refused on --host 0.0.0.0"):
        run_serve("--index", str(tmp_path), "--no-token", "--host", "0.0.0.0")
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(ValueError, match=f"{short}: the token must be at least 16 characters"):
        run_serve("--index", str(tmp_path), "--token-file", str(short))
    good = tmp_path / "token"
    good.write_text("  0123456789abcdefXYZ\n")
    assert read_token(good) == "0123456789abcdefXYZ"
    monkeypatch.setenv(TOKEN_ENV, "has a space in it, sixteen+")
    with pytest.raises(ValueError, match=f"{TOKEN_ENV}: the token must be printable ASCII"):
        read_token(None)


def test_a_shallow_hasher_cannot_encode_images(tmp_path):
    ITQ(n_bits=8).fit(np.random.default_rng(0).normal(size=(50, 16))).save(tmp_path)
    with pytest.raises(ValueError, match="method itq encodes GIST features, not images"):
        HasherFolder(tmp_path).load()


@pytest.mark.integration  # starts the service on a loopback port
def test_the_command_serves_and_reloads_on_sighup(tmp_path):
    index_dir = make_index(tmp_path / "index", seed=0)
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    command = [sys.executable, "-m", "shdh.commands.serve", "--index", str(index_dir)]
    process = subprocess.Popen([*command, "--no-token", "--port", str(port)], cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: is_ready(url), "/readyz", 60)
        first = requests.get(f"{url}/readyz", timeout=5).json()["version"]
        assert first["generation"] == 1 and first["image_shape"] is None
        make_index(index_dir, seed=1, n=120)
        process.send_signal(signal.SIGHUP)
        wait_until(
            lambda: requests.get(f"{url}/readyz", timeout=5).json()["version"]["n_items"] == 120,
            "the reload",
        )
        hits = requests.post(f"{url}/search/codes", json={"codes": ["0000"], "k": 3}, timeout=5)
        assert hits.status_code == 200 and len(hits.json()["results"][0]["hits"]) == 3
        image = requests.post(
            f"{url}/search/image", data=b"x", headers={"Content-Type": "image/png"}, timeout=5
        )
        assert image.status_code == 409 and "no image encoder" in image.json()["detail"]
    finally:
        process.terminate()
        # uvicorn shuts down gracefully, then re-raises the signal so a supervisor sees it.
        assert process.wait(10) == -signal.SIGTERM


def test_the_milvus_engine_needs_a_uri_and_a_collection_or_an_encoder(tmp_path, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "0123456789abcdef0123")
    for argv, problem in (
        (["--engine", "milvus"], "--engine milvus: give --uri"),
        (["--engine", "milvus", "--uri", "x.db"], "without one .* give --collection"),
        (["--engine", "milvus", "--uri", "x.db", "--index", "i"], "--index and --cache-dir: not"),
        (["--index", "i", "--uri", "x.db"], "--uri, --collection and --nprobe: only with"),
        ([], "--index: required"),
    ):
        with pytest.raises(ValueError, match=problem):
            run_serve(*argv)
