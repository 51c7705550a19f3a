"""A real `mlflow server` (SQLite backend store, artifacts in a SeaweedFS S3 bucket, basic
authentication as in k8s/) on loopback, the smoke pipeline tracked into it with the client's
credentials, the best encoder registered and loaded back by its alias, and everything read back
through its REST API.

The pipeline is the DVC front door run through the library (the dvc.yaml commands in this
process); the client has no S3 credentials, so its artifacts reach the bucket only through the
server's artifact proxy, as on a cluster. The server is stopped by its PID (its process group:
uvicorn workers and the job runner go with it), SeaweedFS by the session fixture.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
import yaml

from shdh.tracking import mlflow_runs as tracking
from shdh.tracking import model_registry
from tests.conftest import REPO
from tests.integration.conftest import S3Server
from tests.mlflow_server import (
    ARTIFACT_PREFIX,
    PASSWORD,
    USER,
    basic_auth_server,
)
from tests.pipelines.front_doors import dvc_params_file, run_dvc_stages, smoke_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]
METHODS = ("shdh", "itq")  # a deep and a shallow method: every kind of run and artifact
SMOKE_RUNS = {f"{m}-16" for m in (*METHODS, "random")}


def authorised(request: urllib.request.Request) -> urllib.request.Request:
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    return request


def get_json(url: str, **query: str) -> dict:
    full = f"{url}?{urllib.parse.urlencode(query)}" if query else url
    request = authorised(urllib.request.Request(full))
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback)
        return json.loads(response.read())


def post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(authorised(request), timeout=30) as response:  # noqa: S310
        return json.loads(response.read())


def log_in(monkeypatch: pytest.MonkeyPatch, user: str, password: str) -> None:
    """As a user does it: MLflow's clients and `shdh` read the credentials from the
    environment, on every request."""
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)


@pytest.fixture(scope="module")
def mlflow_server(s3_server: S3Server, tmp_path_factory) -> Iterator[dict]:
    with basic_auth_server(s3_server, tmp_path_factory.mktemp("mlflow-server")) as server:
        yield server
    # Stopped by its process group when the module is done, so no server outlives the tests
    # that use it, holding its port (checked here: a test that stopped it would end the others').
    assert server["process"].poll() is not None
    with pytest.raises((urllib.error.URLError, OSError)):
        urllib.request.urlopen(f"{server['url']}/health", timeout=2)  # noqa: S310


@pytest.fixture(scope="module")
def smoke_run(mlflow_server, tmp_path_factory) -> dict:
    """The smoke pipeline tracked into the server, by a client without S3 credentials."""
    work = tmp_path_factory.mktemp("smoke")
    params = smoke_settings(METHODS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", mlflow_server["url"])
        log_in(mp, USER, PASSWORD)
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MLFLOW_S3_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        mp.chdir(REPO)  # data.dvc and the git commit, as a user runs it
        run_dvc_stages(dvc_params_file(params, work), params)
    return {"results": work / "results", "work": work}


def test_runs_metrics_and_artifacts_come_back_through_the_rest_api(mlflow_server, smoke_run):
    api = f"{mlflow_server['url']}/api/2.0/mlflow"
    experiment = get_json(f"{api}/experiments/get-by-name", experiment_name="shdh")["experiment"]
    search = {"experiment_ids": [experiment["experiment_id"]], "max_results": 100}
    runs = post_json(f"{api}/runs/search", search)["runs"]
    tags = {
        r["info"]["run_id"]: {t["key"]: t["value"] for t in r["data"].get("tags", [])} for r in runs
    }
    (parent,) = [r for r in runs if tags[r["info"]["run_id"]].get("shdh.role") == "pipeline"]
    parent_id = parent["info"]["run_id"]
    children = {
        r["info"]["run_name"]: r
        for r in runs
        if tags[r["info"]["run_id"]].get("mlflow.parentRunId") == parent_id
    }
    assert set(children) == SMOKE_RUNS and len(runs) == len(SMOKE_RUNS) + 1
    data_md5 = yaml.safe_load((REPO / "data.dvc").read_text())["outs"][0]["md5"]
    for run_id in [parent_id, *(c["info"]["run_id"] for c in children.values())]:
        assert tags[run_id]["profile"] == "smoke" and tags[run_id]["dvc_data_md5"] == data_md5
        assert tags[run_id]["shdh.pipeline_run_id"] == tags[parent_id]["shdh.pipeline_run_id"]
        # the CPU pin the run's maths ran under, by the keys runs have always carried
        assert tags[run_id]["shdh.cpu_pin"] in ("avx2", "off") and tags[run_id]["shdh.cpu_isa"]

    # Metrics: what evaluate wrote to metrics.json, logged on the model's own run.
    scores = json.loads((smoke_run["results"] / "metrics.json").read_text())
    shdh = children["shdh-16"]
    metrics = {m["key"]: m["value"] for m in shdh["data"]["metrics"]}
    assert metrics["ndcg_at_100"] == pytest.approx(scores["shdh"]["16"]["ndcg@100"], abs=1e-6)
    history = get_json(
        f"{api}/metrics/get-history", run_id=shdh["info"]["run_id"], metric_key="loss"
    )["metrics"]
    assert [m["step"] for m in history] == [1]  # one smoke epoch

    # Artifacts: listed and downloaded through the server's proxy, byte for byte.
    # Every method run names them alike (codes.npz, wr.png), so two runs compare artifacts.
    listed = get_json(f"{api}/artifacts/list", run_id=shdh["info"]["run_id"])
    assert {"codes.npz", "wr.png"} <= {f["path"] for f in listed["files"]}
    url = f"{mlflow_server['url']}/get-artifact?" + urllib.parse.urlencode(
        {"path": "codes.npz", "run_uuid": shdh["info"]["run_id"]}
    )
    with urllib.request.urlopen(authorised(urllib.request.Request(url)), timeout=30) as response:
        downloaded = response.read()
    assert downloaded == (smoke_run["results"] / "codes" / "shdh-16.npz").read_bytes()
    # The encoder was logged as a model: its MLmodel reaches the client through the REST API.
    model_id = tags[shdh["info"]["run_id"]]["shdh.model_uri"].removeprefix("models:/")
    model = get_json(f"{api}/logged-models/{model_id}")["model"]
    assert model["info"]["source_run_id"] == shdh["info"]["run_id"]


def test_artifacts_live_in_the_s3_bucket(mlflow_server, smoke_run, s3_server):
    listing = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=ARTIFACT_PREFIX)
    keys = [item["Key"] for item in listing.get("Contents", [])]
    while listing.get("IsTruncated"):
        listing = s3_server.client().list_objects_v2(
            Bucket=s3_server.bucket,
            Prefix=ARTIFACT_PREFIX,
            ContinuationToken=listing["NextContinuationToken"],
        )
        keys += [item["Key"] for item in listing.get("Contents", [])]
    assert any(k.endswith("/artifacts/codes.npz") for k in keys)
    assert any(k.endswith("/checkpoint/checkpoint.pt") for k in keys)
    assert sum(k.endswith("/MLmodel") for k in keys) == 1  # the SHDH encoder


def test_the_parent_run_tells_the_story_of_the_pipeline_run(mlflow_server, smoke_run):
    api = f"{mlflow_server['url']}/api/2.0/mlflow"
    experiment = get_json(f"{api}/experiments/get-by-name", experiment_name="shdh")["experiment"]
    kind = {t["key"]: t["value"] for t in experiment["tags"]}["mlflow.experimentKind"]
    assert kind == "custom_model_development"
    search = {
        "experiment_ids": [experiment["experiment_id"]],
        "filter": "tags.`shdh.role` = 'pipeline'",
    }
    (parent,) = post_json(f"{api}/runs/search", search)["runs"]
    assert parent["info"]["status"] == "FINISHED"
    tags = {t["key"]: t["value"] for t in parent["data"]["tags"]}
    assert "| shdh | 16 |" in tags["mlflow.note.content"]
    assert tags["mlflow.source.name"] == "dvc.yaml" and tags["mlflow.source.type"] == "LOCAL"
    assert len(tags["mlflow.source.git.commit"]) == 40
    params = {p["key"]: p["value"] for p in parent["data"]["params"]}
    assert params["profile"] == "smoke" and params["train.epochs"] == "1"
    scores = json.loads((smoke_run["results"] / "metrics.json").read_text())
    # Per-method scores live on the method's own run, not on the parent.
    assert not any(m["key"].startswith("ndcg_at_100/") for m in parent["data"].get("metrics", []))
    search = {
        "experiment_ids": [experiment["experiment_id"]],
        "filter": f"tags.`mlflow.parentRunId` = '{parent['info']['run_id']}' "
        "and tags.method = 'shdh'",
    }
    (child,) = post_json(f"{api}/runs/search", search)["runs"]
    metrics = {m["key"]: m["value"] for m in child["data"]["metrics"]}
    assert metrics["ndcg_at_100"] == pytest.approx(scores["shdh"]["16"]["ndcg@100"])
    listed = get_json(f"{api}/artifacts/list", run_id=parent["info"]["run_id"], path="report")
    assert "report/report.html" in [f["path"] for f in listed["files"]]


def test_requests_without_or_with_wrong_credentials_are_refused(mlflow_server, monkeypatch):
    url = f"{mlflow_server['url']}/api/2.0/mlflow/experiments/get-by-name?experiment_name=shdh"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=30)  # noqa: S310 (loopback)
    assert refused.value.code == 401
    log_in(monkeypatch, USER, "wrong")
    with pytest.raises(tracking.TrackingUnavailableError, match="MLFLOW_TRACKING_PASSWORD"):
        tracking.check_server(mlflow_server["url"])
    log_in(monkeypatch, USER, PASSWORD)
    tracking.check_server(mlflow_server["url"])  # the right ones pass


def test_a_changed_password_is_refused_at_once_though_logins_are_remembered(
    mlflow_server, monkeypatch
):
    """The cluster's server remembers a login for a minute (k8s/base/mlflow.yaml: the scrypt
    check would cost every request ~0.15 s of CPU); a password changed through the API is
    still refused by the worker that changed it from the next request on."""
    import configparser

    from mlflow.server import get_app_client

    config = configparser.ConfigParser(interpolation=None)
    config.read(mlflow_server["auth_config"])
    assert config.getint("mlflow", "auth_cache_ttl_seconds") > 0

    admin = get_app_client("basic-auth", tracking_uri=mlflow_server["url"])
    name, old, new = "shdh-rotated", "shdh-rotated-password-0", "shdh-rotated-password-1"
    log_in(monkeypatch, USER, PASSWORD)
    admin.create_user(name, old)
    log_in(monkeypatch, name, old)
    for _ in range(2):  # the second login is the remembered one
        tracking.check_server(mlflow_server["url"])
    log_in(monkeypatch, USER, PASSWORD)
    admin.update_user_password(name, new)
    log_in(monkeypatch, name, old)
    with pytest.raises(tracking.TrackingUnavailableError, match="MLFLOW_TRACKING_PASSWORD"):
        tracking.check_server(mlflow_server["url"])
    log_in(monkeypatch, name, new)
    tracking.check_server(mlflow_server["url"])


def test_the_best_encoder_is_registered_and_loaded_back_by_its_alias(
    mlflow_server, smoke_run, monkeypatch, capsys
):
    """`shdh register` through the server's API and artifact proxy, with the credentials; the
    model loaded by its alias encodes the database images to the codes evaluate wrote. The
    search service's encoder source loads it the same way as a user with no grant (the server's
    default permission, READ: how the Job mlflow-pipeline-user makes the service's user), its
    artifacts through the proxy, and encodes the same codes."""
    import numpy as np
    from mlflow.server import get_app_client

    from shdh.cli import main
    from shdh.core.codes_file import load_codes
    from shdh.serving.encoders import RegisteredModel
    from shdh.steps.prepare import load_prepared

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server["url"])
    log_in(monkeypatch, USER, PASSWORD)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MLFLOW_S3_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(REPO)
    params = str(smoke_run["work"] / "params.yaml")
    assert main(["register", "--params", params, "--name", "shdh-smoke", "--alias", "best"]) == 0
    printed = capsys.readouterr().out
    assert "as shdh-smoke version 1, alias @best" in printed  # one deep method: SHDH wins
    assert "registered shdh-16 (ndcg_at_100 = " in printed
    assert "loaded models:/shdh-smoke@best:" in printed
    model = model_registry.load_by_alias("shdh-smoke", "best")
    ds, split = load_prepared(smoke_run["work"] / "artifacts" / "prepared")
    codes = load_codes(smoke_run["results"] / "codes" / "shdh-16.npz")
    images = np.asarray(ds.images[split.db_idx[:50]])
    np.testing.assert_array_equal(np.asarray(model.predict(images)), codes.db_codes[:50])

    reader, reader_password = "shdh-search-reader", "shdh-search-reader-0123"
    get_app_client("basic-auth", tracking_uri=mlflow_server["url"]).create_user(
        reader, reader_password
    )
    log_in(monkeypatch, reader, reader_password)
    encoder = RegisteredModel("shdh-smoke", "best").load()
    assert encoder.n_bits == 16 and encoder.run_id == model.metadata.run_id
    np.testing.assert_array_equal(encoder.encode(images), codes.db_codes[:50])


def pipeline_user_job() -> tuple[str, dict[str, str]]:
    """The script of the Job that creates the steps' MLflow user (k8s/base), and the values its
    manifest sets literally."""
    (job,) = yaml.safe_load_all((REPO / "k8s" / "base" / "mlflow-pipeline-user.yaml").read_text())
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-c"]
    return container["args"][0], {i["name"]: i["value"] for i in container["env"] if "value" in i}


def test_the_steps_user_edits_the_pipelines_experiment_and_administers_nothing(
    mlflow_server, monkeypatch
):
    """The Job run as the cluster runs it, twice (the second time with a new password, as after
    a rotation): the steps' user logs runs into the experiment and tags the registered model,
    but may not write to another experiment nor create users; the search service's user reads
    the model's versions and the runs, and changes nothing."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.server import get_app_client

    url = mlflow_server["url"]
    script, literal = pipeline_user_job()
    experiment, model = "shdh-least-privilege", "shdh-least-privilege-encoder"
    step_user, search_user = "shdh-pipeline", "shdh-search"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    log_in(monkeypatch, USER, PASSWORD)
    admin = MlflowClient(url)
    admin.create_registered_model(model)  # one an earlier install registered
    other = admin.create_experiment("shdh-least-privilege-other")
    for password in ("shdh-step-password-0123", "shdh-step-password-4567"):
        env = {
            **os.environ,
            **literal,
            "MLFLOW_EXPERIMENT_NAME": experiment,
            "SHDH_REGISTERED_MODEL": model,
            "PIPELINE_USERNAME": step_user,
            "PIPELINE_PASSWORD": password,
            "SEARCH_USERNAME": search_user,
            "SEARCH_PASSWORD": f"search-{password}",
        }
        result = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr
    assert f"{step_user} may edit registered_model {model}" in result.stdout

    log_in(monkeypatch, step_user, password)
    step = MlflowClient(url)
    run = step.create_run(step.get_experiment_by_name(experiment).experiment_id)
    step.log_metric(run.info.run_id, "ndcg_at_100", 0.9)
    step.set_terminated(run.info.run_id)
    step.set_registered_model_tag(model, "shdh.champion_of", run.info.run_id)
    with pytest.raises(MlflowException, match="Permission denied"):
        step.create_run(other)
    with pytest.raises(MlflowException, match="Permission denied"):
        get_app_client("basic-auth", tracking_uri=url).create_user("intruder", "x" * 16)
    # what the register step does as the steps' user: a version, and the alias the service loads
    version = step.create_model_version(model, f"runs:/{run.info.run_id}/model", run.info.run_id)
    step.set_registered_model_alias(model, "champion", version.version)

    log_in(monkeypatch, search_user, f"search-{password}")
    search = MlflowClient(url)
    assert search.get_model_version_by_alias(model, "champion").run_id == run.info.run_id
    assert search.get_run(run.info.run_id).data.metrics["ndcg_at_100"] == 0.9
    for write in (
        lambda: search.create_run(step.get_experiment_by_name(experiment).experiment_id),
        lambda: search.set_registered_model_alias(model, "champion", "0"),
        lambda: search.set_registered_model_tag(model, "shdh.champion_of", "x"),
        lambda: search.log_metric(run.info.run_id, "ndcg_at_100", 1.0),
    ):
        with pytest.raises(MlflowException, match="Permission denied"):
            write()
    assert search.get_model_version_by_alias(model, "champion").version == version.version

    # The first password no longer logs in.
    log_in(monkeypatch, step_user, "shdh-step-password-0123")
    with pytest.raises(MlflowException):
        MlflowClient(url).get_experiment_by_name(experiment)
