"""Image queries through a real encoder: a deep hasher trained by the pipeline's steps, served
from its folder and, once registered, by its alias. A database image sent as a PNG is decoded
to the very array the pipeline encoded, so the service's answer is the offline ranking of the
pipeline's own code for that item; an index encoded by another run is refused."""

from __future__ import annotations

import mlflow
import numpy as np
import pytest
import requests

from shdh.core.codes_file import load_codes
from shdh.ranking.exact import integer_weights, rank_with_distances
from shdh.ranking.search_index import SearchIndex, write_index
from shdh.serving import HasherFolder, RegisteredModel, create_app
from shdh.steps.prepare import load_prepared
from shdh.tracking import encoder_model, mlflow_runs
from tests.serving.server import AUTH, TOKEN, b64, png, serving, wait_until
from tests.unit.test_mlflow_model import store, trained  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.integration]
NAME, ALIAS = "serve-encoder", "champion"


@pytest.fixture(scope="module")
def database(trained):  # noqa: F811
    """The split's database images, and an index of the pipeline's own codes for them."""
    ds, split = load_prepared(trained["tmp"] / "prepared")
    codes = load_codes(trained["tmp"] / "results" / "codes" / "shdh-16.npz")
    hasher_dir = trained["tmp"] / "models" / "shdh" / "shdh-16" / "hasher"
    index_dir = write_index(
        trained["tmp"] / "index",
        codes=codes.db_codes,
        item_ids=ds.ids[split.db_idx],
        ancestors=np.zeros((len(split.db_idx), 1), np.int32),
        segment_sizes=codes.segment_sizes,
        weights=codes.segment_weights,
        record={
            "method": "shdh",
            "dataset": ds.name,
            "encoder": {"name": NAME, "version": "1", "alias": ALIAS, "run_id": trained["run_id"]},
        },
    )
    images = np.asarray(ds.images[split.db_idx])
    return {"images": images, "index": index_dir, "hasher": hasher_dir, "codes": codes}


def registered(hasher_dir, example) -> str:
    """Log the hasher as a model in a run of its own, register it, point the alias at it."""
    with mlflow_runs.run(run_name="shdh-16-served") as run:
        encoder_model.log_encoder(hasher_dir, example)
    version = mlflow.register_model(f"runs:/{run.info.run_id}/encoder", NAME)
    mlflow.MlflowClient().set_registered_model_alias(NAME, ALIAS, version.version)
    return run.info.run_id


def test_an_image_of_the_database_finds_the_pipelines_ranking(store, database):  # noqa: F811
    picked = [0, 5, 9]
    files = [b64(png(database["images"][i])) for i in picked]
    index = SearchIndex.load(database["index"])
    rows, _ = rank_with_distances(
        database["codes"].db_codes[picked],
        index.packed,
        index.segment_sizes,
        integer_weights(index.weights),
        top_n=8,
    )
    expected = index.item_ids[rows].tolist()
    source = HasherFolder(database["hasher"])
    with serving(create_app(database["index"], encoder=source, token=TOKEN)) as url:
        answer = requests.post(
            f"{url}/search/images", json={"images": files, "k": 8}, headers=AUTH, timeout=60
        )
    assert answer.status_code == 200, answer.text
    assert [[h["item_id"] for h in r["hits"]] for r in answer.json()["results"]] == expected
    assert all(r["hits"][0]["distance"] == 0 for r in answer.json()["results"])


def test_the_registered_encoder_serves_by_alias_and_must_match_the_index(store, database):  # noqa: F811
    # The run that logged this model is not the one the index names: refused until it is.
    run_id = registered(database["hasher"], database["images"][:2])
    source = RegisteredModel(NAME, ALIAS)
    with serving(create_app(database["index"], encoder=source, token=TOKEN), ready=False) as url:

        def detail() -> str:
            return requests.get(f"{url}/readyz", headers=AUTH, timeout=5).json()["detail"]

        wait_until(lambda: "failed" in detail(), "the load to fail", 120)
        assert (
            f"rebuild the index with it first (`shdh index --name {NAME} --alias {ALIAS}`)"
            in detail()
        )
    # The same codes indexed under the registered run: served, and the image finds itself.
    index = SearchIndex.load(database["index"])
    record = index.record | {"encoder": index.record["encoder"] | {"run_id": run_id}}
    rebuilt = write_index(
        database["index"].parent / "index-registered",
        codes=index.packed,
        item_ids=index.item_ids,
        ancestors=index.ancestors,
        segment_sizes=index.segment_sizes,
        weights=index.weights,
        record=record,
    )
    with serving(create_app(rebuilt, encoder=source, token=TOKEN)) as url:
        answer = requests.post(
            f"{url}/search/image?k=3",
            data=png(database["images"][7]),
            headers=AUTH | {"Content-Type": "image/png"},
            timeout=60,
        )
        version = requests.get(f"{url}/readyz", timeout=5).json()["version"]
    assert answer.status_code == 200, answer.text
    top = answer.json()["results"][0]["hits"][0]
    assert top["distance"] == 0
    assert np.array_equal(index.packed[index.rows_of([top["item_id"]])], index.packed[[7]])
    assert version["encoder"]["run_id"] == run_id and version["image_shape"] == [28, 28]


def test_a_fits_folder_serves_as_its_hasher_and_must_be_the_indexs(database):
    """--model-dir takes the fit's folder as `shdh index` does, with the run it recorded; an
    index of another method's codes, or of another run's, is refused at load with both named."""
    from shdh.serving.state import Service

    fit_dir = database["hasher"].parent
    loaded = Service(database["index"], HasherFolder(fit_dir)).reload()
    assert (loaded.encoder.method, loaded.encoder.n_bits) == ("shdh", 16)
    assert loaded.encoder.run_id == loaded.index.record["encoder"]["run_id"]
    index = SearchIndex.load(database["index"])
    for change, refusal in (
        ({"method": "dpsh"}, "the encoder is shdh's but the index in .* holds dpsh's codes"),
        ({"encoder": index.record["encoder"] | {"run_id": "another"}}, "encoded by run another"),
    ):
        other = write_index(
            database["index"].parent / f"index-{next(iter(change))}",
            codes=index.packed,
            item_ids=index.item_ids,
            ancestors=index.ancestors,
            segment_sizes=index.segment_sizes,
            weights=index.weights,
            record=index.record | change,
        )
        for model_dir in (fit_dir, database["hasher"]):
            with pytest.raises(ValueError, match=refusal):
                Service(other, HasherFolder(model_dir)).reload()
