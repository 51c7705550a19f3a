"""Talking to a Kubeflow Pipelines API: credentials, and whether the server can run this pipeline.

The pipeline needs KFP backend MIN_BACKEND or newer, the KFP of Kubeflow 1.10, the oldest
that current Kubeflow releases ship. It names each run's MLflow parent run by
`{{$.pipeline_job_uuid}}` (dsl.PIPELINE_JOB_ID_PLACEHOLDER), which the open-source backend
resolves since 2.5.0 (kubeflow/pipelines#11599; older ones leave the text as is, so every run
would share one MLflow parent); its train tasks' retries reach Argo since 2.5.0 (#11673;
older ones drop them), and a failed run is retried in place (`shdh pipeline retry`) since
2.5.0 (#11585). The compiled pipeline uses nothing newer: no ParallelFor, so neither
dsl.Collected's artifact fan-in (2.14.0) nor a loop cap; every fit is a task of the root DAG
and evaluate takes one Model input per fit (tests/pipelines/test_compile.py checks the IR).

The server's version is the `tag_name` of GET /apis/v2beta1/healthz; kfp.Client.get_kfp_healthz
drops that field (its response model has only multi_user), so it is read from the raw answer.

A multi-user Kubeflow admits a request with one of: a bearer token (an OIDC or Kubernetes
token), a service-account token in a file (a projected volume, or `kubectl create token`,
re-read on every request), or the session cookie of a browser login.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIN_BACKEND = (2, 5, 0)
HEALTHZ = "/apis/v2beta1/healthz"
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
_FIX_CREDENTIALS = "give --token, --token-file or --cookie"


@dataclass(frozen=True)
class Credentials:
    """At most one of: a bearer token, a file holding one, a cookie ("NAME=VALUE")."""

    token: str | None = None
    token_file: str | None = None
    cookie: str | None = None

    def __post_init__(self) -> None:
        given = [name for name in ("token", "token_file", "cookie") if getattr(self, name)]
        if len(given) > 1:
            flags = " and ".join("--" + name.replace("_", "-") for name in given)
            raise ValueError(f"shdh pipeline submit: {flags}: give one way to log in, not two")
        if self.cookie and "=" not in self.cookie:
            raise ValueError(
                f"--cookie: expected NAME=VALUE (e.g. the browser's "
                f"authservice_session or oauth2_proxy cookie), got {self.cookie!r}"
            )

    def bearer(self) -> str | None:
        """The token sent now: --token, or what --token-file holds."""
        if self.token_file is None:
            return self.token
        try:
            token = Path(self.token_file).read_text().strip()
        except OSError as exc:
            raise ValueError(f"--token-file {self.token_file}: cannot read it: {exc}") from exc
        if not token:
            raise ValueError(f"--token-file {self.token_file}: the file is empty")
        return token

    def client_arguments(self) -> dict[str, Any]:
        """kfp.Client's keyword arguments for these credentials."""
        if self.token_file:
            from kfp.client.set_volume_credentials import ServiceAccountTokenVolumeCredentials

            return {"credentials": ServiceAccountTokenVolumeCredentials(self.token_file)}
        if self.token:
            return {"existing_token": self.token}
        return {"cookies": self.cookie} if self.cookie else {}


@dataclass(frozen=True)
class Server:
    version: tuple[int, int, int]
    multi_user: bool


def parse_version(tag: str) -> tuple[int, int, int] | None:
    match = _VERSION.match(tag.strip())
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def healthz(host: str, credentials: Credentials) -> dict[str, Any]:
    """The raw healthz answer, asked with the credentials; refusals become one line each."""
    import kfp_server_api
    import urllib3

    config = kfp_server_api.Configuration(host=host.rstrip("/"))
    bearer = credentials.bearer()
    if bearer:
        config.api_key["authorization"] = bearer
        config.api_key_prefix["authorization"] = "Bearer"
    api = kfp_server_api.HealthzServiceApi(
        kfp_server_api.ApiClient(config, cookie=credentials.cookie)
    )
    try:
        response = api.healthz_service_get_healthz_with_http_info(
            _preload_content=False, _request_timeout=30
        )
    except kfp_server_api.ApiException as exc:
        if exc.status in (401, 403):
            refused = (
                "refused the credentials" if bearer or credentials.cookie else "wants credentials"
            )
            raise RuntimeError(
                f"Kubeflow Pipelines at {host} {refused} (HTTP {exc.status}): {_FIX_CREDENTIALS}"
            ) from exc
        raise RuntimeError(
            f"Kubeflow Pipelines at {host}: {HEALTHZ} answered HTTP {exc.status} {exc.reason}"
        ) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise RuntimeError(f"Kubeflow Pipelines at {host}: no answer ({exc})") from exc
    try:
        answer = json.loads(response.data)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise RuntimeError(
            f"Kubeflow Pipelines at {host}: {HEALTHZ} did not answer JSON (a "
            f"login page?): check --host, or {_FIX_CREDENTIALS}"
        )
    return answer


def check_server(host: str, credentials: Credentials, *, check_version: bool = True) -> Server:
    """The server's version and mode; a server older than MIN_BACKEND, or one whose version
    cannot be told, is refused in one line (unless check_version is False)."""
    answer = healthz(host, credentials)
    tag = str(answer.get("tag_name", ""))
    version = parse_version(tag)
    if check_version:
        if version is None:
            raise RuntimeError(
                f"Kubeflow Pipelines at {host} does not tell its version "
                f"(tag_name {tag!r}); this pipeline needs {dotted(MIN_BACKEND)} "
                "or newer: if it is, pass --skip-version-check"
            )
        if version < MIN_BACKEND:
            raise RuntimeError(
                f"Kubeflow Pipelines at {host} is {dotted(version)}; this "
                f"pipeline needs {dotted(MIN_BACKEND)} or newer (run-id placeholders, "
                "task retries): upgrade the KFP backend"
            )
    return Server(version or (0, 0, 0), bool(answer.get("multi_user", False)))
