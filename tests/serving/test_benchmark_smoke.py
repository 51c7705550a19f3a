"""The latency benchmark's faiss backends (benchmarks/serve_latency.py) answer through the
service's own app: on the bit-repeated codes with the index's exact weighted distances (Eq. 4),
on the plain codes with plain Hamming distances."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace

import faiss  # noqa: F401  (a dev requirement: the benchmark's backends need it)
import numpy as np
import pytest
import requests

from shdh.ranking.exact import unpack_codes
from shdh.ranking.search_index import SearchIndex
from shdh.serving import create_app
from tests.serving.server import REPO, serving


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """The benchmark script as a module (it imports its neighbour provenance.py by name)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(
            "serve_latency", REPO / "benchmarks" / "serve_latency.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    folder = module.build_index(tmp_path_factory.mktemp("bench") / "index", 3000)
    return module, folder


def _served(folder, backend) -> tuple[dict, SearchIndex, list[str]]:
    """The hits of 5 random code queries, k = 50, from the app with `backend` put in place of
    its loaded index as the benchmark does."""
    index = SearchIndex.load(folder)
    rng = np.random.default_rng(7)
    codes = [bytes(rng.integers(0, 256, 8, dtype=np.uint8)).hex() for _ in range(5)]
    app = create_app(folder)
    with serving(app) as url:
        service = app.state.service
        if backend is not None:
            service.current = replace(service.current, index=backend(service.current.index))
        answer = requests.post(f"{url}/search/codes", json={"codes": codes, "k": 50}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json(), index, codes


def test_faiss_on_repeated_bits_gives_the_exact_weighted_distances(bench):
    module, folder = bench
    ours, index, codes = _served(folder, None)
    theirs, _, _ = _served(folder, lambda idx: module.FaissBackend(idx, repeat=True))
    assert theirs["version"]["method"] == "faiss-repeated"
    for mine, faiss_row in zip(ours["results"], theirs["results"], strict=True):
        want = [h["distance"] for h in mine["hits"]]
        got = [h["distance"] for h in faiss_row["hits"]]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        assert got == sorted(got)


def test_faiss_on_plain_codes_gives_plain_hamming(bench):
    module, folder = bench
    answer, index, codes = _served(folder, lambda idx: module.FaissBackend(idx, repeat=False))
    db_bits = unpack_codes(index.packed, index.n_bits)
    for code, row in zip(codes, answer["results"], strict=True):
        query = unpack_codes(np.frombuffer(bytes.fromhex(code), np.uint8)[None], index.n_bits)
        plain = np.sort((db_bits != query).sum(axis=1))[:50]
        assert [h["distance"] for h in row["hits"]] == plain.tolist()
        rows = index.rows_of([h["item_id"] for h in row["hits"]])
        hit_dist = (db_bits[rows] != query).sum(axis=1)
        assert hit_dist.tolist() == plain.tolist()
