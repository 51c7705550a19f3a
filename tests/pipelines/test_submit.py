"""`shdh pipeline submit` against a recording Kubeflow Pipelines API: a real HTTP server on
loopback that answers the REST calls kfp.Client makes as the KFP API does (healthz with the
server's version, pipelines, versions, experiments, runs), refuses requests without the
credentials it is set up with (HTTP 401, as a multi-user Kubeflow's auth proxy does), and keeps
every request with its headers."""

from __future__ import annotations

import email.parser
import email.policy
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from shdh.cli import main
from tests.conftest import REPO

API = "/apis/v2beta1"
TOKEN = "eyJ-a-real-looking-token"
COOKIE = "authservice_session=MTcwMDAwMDAwMHxsb2dnZWQtaW4"


@dataclass
class RecordingKubeflow:
    """Just the REST calls kfp.Client makes for submit; every request is kept."""

    version: str = "2.14.3"
    multi_user: bool = False
    token: str | None = None  # the bearer token it accepts; with none set, any request passes
    cookie: str | None = None  # or the cookie it accepts
    login_page: bool = False  # answer like an auth proxy that sends browsers to a login form
    requests: list[dict] = field(default_factory=list)
    experiments: dict[str, dict] = field(default_factory=dict)
    pipelines: dict[str, dict] = field(default_factory=dict)
    versions: dict[str, list[dict]] = field(default_factory=dict)
    runs: list[dict] = field(default_factory=list)

    def admitted(self, headers: dict[str, str]) -> bool:
        if self.token is None and self.cookie is None:
            return True
        bearer = self.token and headers.get("authorization") == f"Bearer {self.token}"
        cookie = self.cookie and self.cookie in (headers.get("cookie") or "")
        return bool(bearer or cookie)

    def handle(
        self, method: str, path: str, query: dict, headers, body: bytes
    ) -> tuple[int, object]:
        headers = {k.lower(): v for k, v in headers.items()}
        record = {"method": method, "path": path, "query": query, "body": body, "headers": headers}
        self.requests.append(record)
        if self.login_page:
            return 200, "<html><body>Log in to Kubeflow</body></html>"
        if not self.admitted(headers):
            return 401, {"error": "Unauthorized", "code": 16, "message": "Unauthorized"}
        if (method, path) == ("GET", f"{API}/healthz"):
            return 200, {
                "commit_sha": "0123abc",
                "tag_name": self.version,
                "multi_user": self.multi_user,
                "pipeline_store": "database",
            }
        if method == "GET" and path in (f"{API}/experiments", f"{API}/pipelines"):
            kind = path.rsplit("/", 1)[1]
            found = self._named(getattr(self, kind).values(), query)
            return 200, {kind: found, "total_size": len(found)} if found else {}
        if (method, path) == ("POST", f"{API}/experiments"):
            experiment = {**json.loads(body), "experiment_id": f"exp-{len(self.experiments) + 1}"}
            self.experiments[experiment["experiment_id"]] = experiment
            return 200, experiment
        if method == "POST" and path.startswith(f"{API}/pipelines/upload"):
            return self._upload(path, query, headers, body, record)
        if method == "GET" and path.startswith(f"{API}/pipelines/") and path.endswith("/versions"):
            versions = self.versions.get(path.split("/")[-2], [])
            name = self._filtered_name(query)
            versions = [v for v in versions if name is None or v["display_name"] == name]
            versions = versions[: int(query.get("page_size", ["100"])[0])]
            listed = [{k: v for k, v in ver.items() if k != "pipeline_spec"} for ver in versions]
            return 200, {"pipeline_versions": listed} if listed else {}
        if method == "GET" and path.startswith(f"{API}/runs/"):
            found = [r for r in self.runs if r["run_id"] == path.rsplit("/", 1)[1]]
            return (200, found[0]) if found else (404, {"error": "no such run"})
        if method == "POST" and path.startswith(f"{API}/runs/") and path.endswith(":retry"):
            run_id = path.rsplit("/", 1)[1].removesuffix(":retry")
            found = [r for r in self.runs if r["run_id"] == run_id]
            if not found:
                return 404, {"error": "no such run"}
            found[0]["state"] = "RUNNING"
            return 200, {}
        if (method, path) == ("POST", f"{API}/runs"):
            run = {**json.loads(body), "run_id": f"run-{len(self.runs) + 1}", "state": "PENDING"}
            self.runs.append(run)
            return 200, run
        return 404, {"error": f"recording Kubeflow has no {method} {path}"}

    def _named(self, items, query: dict) -> list[dict]:
        """The items with the filter's name in the query's namespace (none: shared ones)."""
        name, namespace = self._filtered_name(query), query.get("namespace", [""])[0]
        return [
            item
            for item in items
            if item["display_name"] == name and (item.get("namespace") or "") == namespace
        ]

    def _upload(self, path, query, headers, body, record) -> tuple[int, dict]:
        spec = self._uploaded_file(headers, body)
        record["spec"] = spec
        if path.endswith("/upload"):
            pipeline_id = f"pipeline-{len(self.pipelines) + 1}"
            name = query["name"][0]
            namespace = query.get("namespace", [None])[0]
            self.pipelines[pipeline_id] = {
                "pipeline_id": pipeline_id,
                "display_name": name,
                "namespace": namespace,
            }
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

    @staticmethod
    def _filtered_name(query: dict) -> str | None:
        if "filter" not in query:
            return None
        predicates = json.loads(query["filter"][0])["predicates"]
        return next(
            p["string_value"] if "string_value" in p else p["stringValue"]
            for p in predicates
            if p["key"] in ("display_name", "name")
        )

    @staticmethod
    def _uploaded_file(headers, body: bytes) -> dict:
        """The pipeline spec (first YAML document) of a multipart/form-data upload."""
        head = f"Content-Type: {headers['content-type']}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
        (part,) = [
            p
            for p in message.iter_parts()
            if p.get_param("name", header="content-disposition") == "uploadfile"
        ]
        return next(yaml.safe_load_all(part.get_payload(decode=True)))


@pytest.fixture
def kubeflow() -> Iterator[tuple[RecordingKubeflow, str]]:
    server_state = RecordingKubeflow()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, payload = server_state.handle(
                self.command, url.path, parse_qs(url.query), self.headers, body
            )
            html = isinstance(payload, str)
            data = payload.encode() if html else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html" if html else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, *args) -> None:  # keep the test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # a short poll: shutdown() waits for the next one, half a second by default, in every test
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server_state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def submit(host: str, *extra: str) -> int:
    return main(["pipeline", "submit", "--host", host, "--profile", "smoke", *extra])


def error_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


@pytest.fixture(autouse=True)
def _in_the_checkout(monkeypatch):
    monkeypatch.chdir(REPO)
    for name in ("SHDH_KFP_TOKEN", "SHDH_KFP_COOKIE"):
        monkeypatch.delenv(name, raising=False)


def test_submit_uploads_the_spec_and_starts_a_run_with_the_settings(kubeflow):
    server, host = kubeflow
    assert (
        submit(
            host,
            "--experiment",
            "team-a",
            "--set",
            "train.epochs=3",
            "--run-name",
            "try-1",
            "--service-account",
            "shdh-pipeline",
        )
        == 0
    )
    assert server.requests[0]["path"] == f"{API}/healthz"  # asked before anything is uploaded
    (upload,) = [r for r in server.requests if r["path"].endswith("/pipelines/upload")]
    spec = upload["spec"]
    assert spec["pipelineInfo"]["name"] == "shdh"
    assert "exec-train" in spec["deploymentSpec"]["executors"]
    assert server.experiments["exp-1"]["display_name"] == "team-a"
    (run,) = server.runs
    assert run["display_name"] == "try-1" and run["experiment_id"] == "exp-1"
    assert run["service_account"] == "shdh-pipeline"
    # The run uses the version named by the spec's hash (the pipeline's first is version-1).
    (version,) = [v for v in server.versions["pipeline-1"] if v["display_name"].startswith("shdh-")]
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


def test_submit_follows_the_overlay_it_is_given(kubeflow):
    """No GPU without an overlay (dev); --overlay gpu asks for one and trains with device cuda."""
    server, host = kubeflow
    assert submit(host) == 0
    assert submit(host, "--overlay", "gpu") == 0
    specs = {
        v["pipeline_version_id"]: v["pipeline_spec"] for vs in server.versions.values() for v in vs
    }
    dev_spec, gpu_spec = [
        specs[run["pipeline_version_reference"]["pipeline_version_id"]] for run in server.runs
    ]
    dev_train = dev_spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    gpu_train = gpu_spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert "accelerator" not in dev_train["resources"]
    assert gpu_train["resources"]["accelerator"]["resourceType"] == "nvidia.com/gpu"
    devices = [
        json.loads(run["runtime_config"]["parameters"]["train"])["device"] for run in server.runs
    ]
    assert devices == ["cpu", "cuda"]


def test_resubmitting_adds_a_version_only_for_a_new_spec(kubeflow):
    server, host = kubeflow
    assert submit(host) == 0
    assert submit(host) == 0  # same spec: the version is reused
    assert submit(host, "--set", "train.epochs=2") == 0  # new spec: a new version
    uploads = [r["path"].rsplit("/", 1)[1] for r in server.requests if "/upload" in r["path"]]
    assert uploads == ["upload", "upload_version", "upload_version"]
    assert [r["pipeline_version_reference"]["pipeline_version_id"] for r in server.runs] == [
        "version-2",
        "version-2",
        "version-3",
    ]
    assert len(server.experiments) == 1  # the experiment is found, not created again


@pytest.mark.parametrize("version", ["2.4.1", "2.3.0", "1.8.5"])
def test_a_server_older_than_the_minimum_is_refused_before_any_upload(kubeflow, caplog, version):
    server, host = kubeflow
    server.version = version
    assert submit(host) == 1
    (line,) = error_lines(caplog)
    assert f"is {version}; this pipeline needs 2.5.0 or newer" in line and host in line
    assert [r["path"] for r in server.requests] == [f"{API}/healthz"]


def test_the_kfp_of_kubeflow_1_10_is_accepted(kubeflow):
    """2.5.0 is enough: the pipeline has no ParallelFor, so it needs no dsl.Collected (2.14.0)."""
    server, host = kubeflow
    server.version = "2.5.0"
    assert submit(host) == 0
    assert [r for r in server.requests if r["path"].endswith("/pipelines/upload")]
    assert len(server.runs) == 1


def test_a_server_that_hides_its_version_needs_the_skip_flag(kubeflow, caplog):
    server, host = kubeflow
    server.version = "unknown"
    assert submit(host) == 1
    (line,) = error_lines(caplog)
    assert "does not tell its version (tag_name 'unknown')" in line
    assert "--skip-version-check" in line
    assert submit(host, "--skip-version-check") == 0
    assert len(server.runs) == 1


def test_multi_user_with_a_bearer_token_and_a_namespace(kubeflow, monkeypatch):
    """Every request carries the token; the pipeline and the experiment go to the namespace."""
    server, host = kubeflow
    server.multi_user, server.token = True, TOKEN
    monkeypatch.setenv("SHDH_KFP_TOKEN", TOKEN)  # kept off the command line
    assert submit(host, "--namespace", "team-a") == 0
    assert {r["headers"].get("authorization") for r in server.requests} == {f"Bearer {TOKEN}"}
    (pipeline,) = server.pipelines.values()
    assert pipeline["namespace"] == "team-a"
    assert server.experiments["exp-1"]["namespace"] == "team-a"
    assert len(server.runs) == 1


def test_a_service_account_token_file(kubeflow, tmp_path):
    server, host = kubeflow
    server.multi_user, server.token = True, TOKEN
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert submit(host, "--namespace", "team-a", "--token-file", str(token_file)) == 0
    assert {r["headers"].get("authorization") for r in server.requests} == {f"Bearer {TOKEN}"}
    assert len(server.runs) == 1


def test_a_session_cookie(kubeflow):
    server, host = kubeflow
    server.multi_user, server.cookie = True, COOKIE
    assert submit(host, "--namespace", "team-a", "--cookie", COOKIE) == 0
    assert all(COOKIE in r["headers"].get("cookie", "") for r in server.requests)
    assert len(server.runs) == 1


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ((), "wants credentials (HTTP 401)"),
        (("--token", "stale-token"), "refused the credentials (HTTP 401)"),
        (("--cookie", "authservice_session=expired"), "refused the credentials (HTTP 401)"),
    ],
)
def test_refused_credentials_are_one_line_and_nothing_is_uploaded(kubeflow, caplog, given, words):
    server, host = kubeflow
    server.multi_user, server.token = True, TOKEN
    assert submit(host, "--namespace", "team-a", *given) == 1
    (line,) = error_lines(caplog)
    assert words in line and host in line
    assert "give --token, --token-file or --cookie" in line
    assert [r["path"] for r in server.requests] == [f"{API}/healthz"]


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ({"multi_user": True}, "is multi-user: give --namespace"),  # without --namespace
        ({"login_page": True}, "did not answer JSON (a login page?)"),  # an auth proxy's form
    ],
)
def test_a_server_that_cannot_take_the_run_is_named(kubeflow, caplog, state, words):
    server, host = kubeflow
    for name, value in state.items():
        setattr(server, name, value)
    assert submit(host) == 1
    (line,) = error_lines(caplog)
    assert words in line and host in line
    assert not server.runs


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (("--token", TOKEN, "--token-file", "{tmp}/token"), "--token and --token-file: give one"),
        (("--token-file", "{tmp}/missing"), "--token-file {tmp}/missing: cannot read it"),
        (("--token-file", "{tmp}/empty"), "--token-file {tmp}/empty: the file is empty"),
        (("--cookie", "no-equals-sign"), "--cookie: expected NAME=VALUE"),
    ],
)
def test_bad_credential_options_are_one_line(kubeflow, caplog, tmp_path, given, words):
    server, host = kubeflow
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "empty").write_text("\n")
    assert submit(host, *(word.format(tmp=tmp_path) for word in given)) == 1
    (line,) = error_lines(caplog)
    assert words.format(tmp=tmp_path) in line
    assert not server.requests


def test_unreachable_host_is_named(caplog):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert submit(f"http://127.0.0.1:{port}") == 1
    (line,) = error_lines(caplog)
    assert str(port) in line and "no answer" in line


# --- shdh pipeline retry: what an evicted or deleted train pod needs ---------------------------


def retry(host: str, run_id: str, *extra: str) -> int:
    return main(["pipeline", "retry", run_id, "--host", host, *extra])


def test_retry_restarts_a_failed_run_in_place(kubeflow, capsys):
    """The same run, so finished tasks are kept and the interrupted fit finds its checkpoint
    under the same pipeline run id."""
    server, host = kubeflow
    assert submit(host) == 0
    (run,) = server.runs
    run["state"] = "FAILED"  # its train pod was evicted
    assert retry(host, run["run_id"]) == 0
    posted = [r for r in server.requests if r["method"] == "POST"]
    assert posted[-1]["path"] == f"{API}/runs/{run['run_id']}:retry"
    assert run["state"] == "RUNNING" and len(server.runs) == 1  # no new run
    assert f"run {run['run_id']} (FAILED) retried" in capsys.readouterr().out


@pytest.mark.parametrize("state", ["RUNNING", "SUCCEEDED"])
def test_retry_refuses_a_run_that_did_not_fail(kubeflow, caplog, state):
    server, host = kubeflow
    assert submit(host) == 0
    (run,) = server.runs
    run["state"] = state
    assert retry(host, run["run_id"]) == 1
    assert error_lines(caplog)[-1].endswith(
        f"run {run['run_id']} is {state}: only a failed or canceled run can be retried"
    )
    assert not [r for r in server.requests if r["path"].endswith(":retry")]


def test_retry_checks_the_server_and_names_an_unknown_run(kubeflow, caplog):
    server, host = kubeflow
    server.version = "2.4.1"
    assert retry(host, "run-9") == 1
    assert "2.4.1" in error_lines(caplog)[-1]
    server.version = "2.14.3"
    assert retry(host, "run-9") == 1
    assert "HTTP 404" in error_lines(caplog)[-1]
