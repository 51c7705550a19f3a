"""The index step on a tiny prepared dataset with a real fitted hasher: the index ranks every
query exactly as the score step does (same codes, same ids, same order), its shared levels are
the label tree's, and it is built from a model folder or from the registry by alias."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shdh.cli import main
from shdh.hashers.shdh import SHDH
from shdh.ranking.exact import integer_weights, rank_with_distances
from shdh.ranking.index_file import INDEX_RECORD
from shdh.ranking.search_index import SearchIndex
from shdh.steps.fit_deep import training_inputs
from shdh.steps.split_inputs import load_split
from tests.commands.test_steps import run_steps, smoke_params
from tests.conftest import write_fashion_mnist_raw
from tests.unit.toys import TINY_NET, deep_hasher


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """Prepared Fashion-MNIST-shaped data, its tree and S-matrix, and a 12-bit SHDH fitted on
    120 training items, saved as a fit's model folder."""
    tmp = tmp_path_factory.mktemp("index")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        raw = write_fashion_mnist_raw(tmp / "raw")
        params = smoke_params(tmp, raw, index={"out_dir": str(tmp / "index")})
        run_steps(params, ["prepare"], ["tree"], ["smatrix"])
    X, pairs = training_inputs(SHDH, tmp / "prepared", tmp / "smatrix.npz", 120)
    hasher = deep_hasher(SHDH, n_bits=12, seed=0, **TINY_NET)
    hasher.fit(X, pairs)
    hasher.save(tmp / "model" / "hasher")
    return {"tmp": tmp, "params": params, "hasher": hasher}


def score_step_codes(fitted):
    """The codes file the score step would write for this hasher (its Split, its encode)."""
    tmp, hasher = fitted["tmp"], fitted["hasher"]
    split = load_split(tmp / "prepared", tmp / "smatrix.npz", None)
    X_q, X_db = split.encoded("images", {})
    sizes, weights = hasher.segment_sizes(), hasher.segment_weights()
    return split.codes(hasher.encode(X_q), hasher.encode(X_db), sizes, weights)


def test_the_index_ranks_as_the_score_step(fitted, capsys):
    tmp = fitted["tmp"]
    args = ["index", "--params", str(fitted["params"]), "--model-dir", str(tmp / "model")]
    assert main(args) == 0
    assert f"{tmp / 'index'}/" in capsys.readouterr().out
    index = SearchIndex.load(tmp / "index")
    codes = score_step_codes(fitted)
    np.testing.assert_array_equal(index.packed, codes.db_codes)
    np.testing.assert_array_equal(index.item_ids, codes.db_ids)
    k = 25
    rows, dist = rank_with_distances(
        codes.query_codes,
        codes.db_codes,
        codes.segment_sizes,
        integer_weights(codes.segment_weights),
        top_n=k,
    )
    assert len(np.unique(dist)) < dist.size  # 12 bits over ~270 items: ties are everywhere
    hits = index.search_codes(codes.query_codes, k)
    assert [[h.item_id for h in row] for row in hits] == codes.db_ids[rows].tolist()
    assert index.segment_sizes == tuple(codes.segment_sizes.tolist())
    assert index.weights == tuple(codes.segment_weights.tolist())
    record = json.loads((tmp / "index" / INDEX_RECORD).read_text())
    assert (record["method"], record["bits"], record["dataset"]) == ("shdh", 12, "fashion-mnist-h")
    assert record["encoder"] == {"name": None, "version": None, "alias": None, "run_id": None}


def test_shared_levels_are_the_trees(fitted):
    tmp = fitted["tmp"]
    assert (
        main(["index", "--params", str(fitted["params"]), "--model-dir", str(tmp / "model")]) == 0
    )
    index = SearchIndex.load(tmp / "index")
    codes = score_step_codes(fitted)
    query = int(codes.db_ids[3])
    hits = index.search_ids([query], 40)[0]
    assert len(hits) == 40 and hits[0].item_id == query
    assert {hit.shared_level for hit in hits} > {4}  # the query's own class and coarser matches
    for hit in hits:
        a, b = codes.db_ancestors[3], codes.db_ancestors[codes.db_ids.tolist().index(hit.item_id)]
        assert hit.shared_level == int(np.sum((a == b) & (a >= 0)))  # nested: root .. deepest


@pytest.mark.slow  # MLflow's store and a logged model: half a minute on two busy cores
def test_the_registered_encoder_is_loaded_by_alias_and_recorded(fitted, tmp_path, caplog):
    import mlflow

    from shdh.tracking import encoder_model, mlflow_runs

    tmp = fitted["tmp"]
    example = np.asarray(training_inputs(SHDH, tmp / "prepared", tmp / "smatrix.npz", 2)[0])
    with mlflow_runs.run(run_name="shdh-12"):
        uri = encoder_model.log_encoder(tmp / "model" / "hasher", example)
    mlflow.register_model(uri, "enc")
    mlflow.MlflowClient().set_registered_model_alias("enc", "live", "1")
    out = tmp_path / "index"
    args = ["index", "--params", str(fitted["params"]), "--name", "enc", "--alias", "live"]
    assert main([*args, "--out", str(out)]) == 0
    index = SearchIndex.load(out)
    assert index.record["encoder"] == {
        "name": "enc",
        "version": "1",
        "alias": "live",
        "run_id": None,  # the version names it (shdh.steps.index._without_registered_run)
    }
    np.testing.assert_array_equal(index.packed, score_step_codes(fitted).db_codes)
    # an alias the registry does not hold: one line that says what to do
    assert main(["index", "--params", str(fitted["params"]), "--alias", "none"]) == 1
    assert "models:/shdh-encoder@none: cannot load it from the registry" in caplog.text


def test_a_missing_model_folder_or_two_sources_fail_with_one_line(fitted, tmp_path, caplog):
    params = str(fitted["params"])
    assert main(["index", "--params", params, "--model-dir", str(tmp_path / "none")]) == 1
    assert "no such folder" in caplog.text
    assert main(["index", "--params", params, "--model-dir", str(tmp_path), "--alias", "x"]) == 1
    assert "not both" in caplog.text
