"""`shdh pipeline submit` against a small fake Kubeflow Pipelines API that records what it gets:
the compiled spec is uploaded (a pipeline, then a version per distinct spec) and the run is
created with the settings as its parameters."""

from __future__ import annotations

import email.parser
import email.policy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from shdh.cli import main
from tests.conftest import REPO

API = "/apis/v2beta1"


class FakeKubeflow:
    """Just the REST calls kfp.Client makes for submit; every request is kept."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.experiments: dict[str, dict] = {}
        self.pipelines: dict[str, dict] = {}
        self.versions: dict[str, list[dict]] = {}
        self.runs: list[dict] = []

    def handle(self, method: str, path: str, query: dict, headers, body: bytes) -> tuple[int, dict]:
        record = {"method": method, "path": path, "query": query, "body": body}
        self.requests.append(record)
        if (method, path) == ("GET", f"{API}/healthz"):
            return 200, {"multi_user": False}
        if (method, path) == ("GET", f"{API}/experiments"):
            name = self._filtered_name(query)
            found = [e for e in self.experiments.values() if e["display_name"] == name]
            return 200, {"experiments": found, "total_size": len(found)} if found else {}
        if (method, path) == ("POST", f"{API}/experiments"):
            experiment = {**json.loads(body), "experiment_id": f"exp-{len(self.experiments) + 1}"}
            self.experiments[experiment["experiment_id"]] = experiment
            return 200, experiment
        if (method, path) == ("GET", f"{API}/pipelines"):
            name = self._filtered_name(query)
            found = [p for p in self.pipelines.values() if p["display_name"] == name]
            return 200, {"pipelines": found, "total_size": len(found)} if found else {}
        if (method, path) in (("POST", f"{API}/pipelines/upload"),
                              ("POST", f"{API}/pipelines/upload_version")):  # fmt: skip
            spec = self._uploaded_file(headers, body)
            record["spec"] = spec
            if path.endswith("/upload"):
                pipeline_id = f"pipeline-{len(self.pipelines) + 1}"
                name = query["name"][0]
                self.pipelines[pipeline_id] = {"pipeline_id": pipeline_id, "display_name": name}
                version_name = name
            else:
                pipeline_id, version_name = query["pipelineid"][0], query["name"][0]
            number = sum(map(len, self.versions.values())) + 1
            version = {
                "pipeline_id": pipeline_id,
                "display_name": version_name,
                "pipeline_version_id": f"version-{number}",
                "pipeline_spec": spec,
            }
            self.versions.setdefault(pipeline_id, []).insert(0, version)  # newest first
            return 200, self.pipelines[pipeline_id] if path.endswith("/upload") else version
        if method == "GET" and path.startswith(f"{API}/pipelines/") and path.endswith("/versions"):
            pipeline_id = path.split("/")[-2]
            versions = self.versions.get(pipeline_id, [])
            name = self._filtered_name(query)
            if name is not None:
                versions = [v for v in versions if v["display_name"] == name]
            versions = versions[: int(query.get("page_size", ["100"])[0])]
            listed = [{k: v for k, v in ver.items() if k != "pipeline_spec"} for ver in versions]
            return 200, {"pipeline_versions": listed} if listed else {}
        if (method, path) == ("POST", f"{API}/runs"):
            run = {**json.loads(body), "run_id": f"run-{len(self.runs) + 1}", "state": "PENDING"}
            self.runs.append(run)
            return 200, run
        return 404, {"error": f"fake Kubeflow has no {method} {path}"}

    @staticmethod
    def _filtered_name(query: dict) -> str | None:
        if "filter" not in query:
            return None
        predicates = json.loads(query["filter"][0])["predicates"]
        return next(p["string_value"] if "string_value" in p else p["stringValue"]
                    for p in predicates if p["key"] in ("display_name", "name"))  # fmt: skip

    @staticmethod
    def _uploaded_file(headers, body: bytes) -> dict:
        """The pipeline spec (first YAML document) of a multipart/form-data upload."""
        head = f"Content-Type: {headers['Content-Type']}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
        (part,) = [
            p
            for p in message.iter_parts()
            if p.get_param("name", header="content-disposition") == "uploadfile"
        ]
        return next(yaml.safe_load_all(part.get_payload(decode=True)))


@pytest.fixture
def kubeflow() -> Iterator[tuple[FakeKubeflow, str]]:
    fake = FakeKubeflow()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, payload = fake.handle(self.command, url.path, parse_qs(url.query),
                                          self.headers, body)  # fmt: skip
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, *args) -> None:  # keep the test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def submit(host: str, *extra: str) -> int:
    return main(["pipeline", "submit", "--host", host, "--profile", "smoke", *extra])


def test_submit_uploads_the_spec_and_starts_a_run_with_the_settings(kubeflow, monkeypatch):
    fake, host = kubeflow
    monkeypatch.chdir(REPO)
    assert submit(host, "--experiment", "team-a", "--param", "train.epochs=3",
                  "--run-name", "try-1", "--service-account", "shdh-pipeline") == 0  # fmt: skip
    (upload,) = [r for r in fake.requests if r["path"].endswith("/pipelines/upload")]
    spec = upload["spec"]
    assert spec["pipelineInfo"]["name"] == "shdh"
    assert "exec-train" in spec["deploymentSpec"]["executors"]
    assert fake.experiments["exp-1"]["display_name"] == "team-a"
    (run,) = fake.runs
    assert run["display_name"] == "try-1" and run["experiment_id"] == "exp-1"
    assert run["service_account"] == "shdh-pipeline"
    # The run uses the version named by the spec's hash (the pipeline's first is version-1).
    (version,) = [v for v in fake.versions["pipeline-1"] if v["display_name"].startswith("shdh-")]
    assert version["pipeline_spec"] == spec
    assert run["pipeline_version_reference"] == {
        "pipeline_id": "pipeline-1",
        "pipeline_version_id": version["pipeline_version_id"],
    }
    parameters = run["runtime_config"]["parameters"]
    assert parameters["profile"] == "smoke" and parameters["seed"] == 0
    train = json.loads(parameters["train"])
    assert train["epochs"] == 3 and train["methods"] == ["shdh", "dpsh"]
    # The uploaded spec is compiled for the cluster: the run's settings are its defaults.
    defaults = spec["root"]["inputDefinitions"]["parameters"]
    assert json.loads(defaults["train"]["defaultValue"]) == train


def test_resubmitting_adds_a_version_only_for_a_new_spec(kubeflow, monkeypatch):
    fake, host = kubeflow
    monkeypatch.chdir(REPO)
    assert submit(host) == 0
    assert submit(host) == 0  # same spec: the version is reused
    assert submit(host, "--param", "train.epochs=2") == 0  # new spec: a new version
    uploads = [r["path"].rsplit("/", 1)[1] for r in fake.requests if "/upload" in r["path"]]
    assert uploads == ["upload", "upload_version", "upload_version"]
    assert [r["pipeline_version_reference"]["pipeline_version_id"] for r in fake.runs] == [
        "version-2",
        "version-2",
        "version-3",
    ]
    assert len(fake.experiments) == 1  # the experiment is found, not created again


def test_unreachable_host_is_named(monkeypatch, caplog):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.chdir(REPO)
    assert submit(f"http://127.0.0.1:{port}") == 1
    assert str(port) in caplog.text
