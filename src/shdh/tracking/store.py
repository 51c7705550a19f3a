"""Where MLflow runs go: one store per repository, shared safely by concurrent writers.

MLFLOW_TRACKING_URI names the store when set (a team server). Otherwise every way of running the
pipeline lands in one SQLite file, mlflow.db at the root of the repository the run came from:
`dvc repro` and `dvc exp run` in the workspace, and also `dvc exp run --temp` and
`dvc queue start`, whose stages run in a temporary copy (.dvc/tmp/exps/...) that DVC deletes
afterwards. DVC tells its stages where the repository they came from is in DVC_ROOT; a relative
SQLite path, the default included, is anchored there, so runs never land in the temporary copy.

Several writers share that file when queued experiments run in parallel (`-j N`). SQLite takes
one writer at a time: each client waits for the lock (a busy timeout, instead of failing with
"database is locked" after 5 s), the file is switched to write-ahead logging so that readers do
not block writers, and the first set-up of a fresh file (MLflow's table migrations and the
experiment) is serialised with a file lock beside it, since two processes migrating one empty
file at once fail.

A remote server is probed once with a short timeout, because MLflow's own client retries for
minutes before it gives up; a server with basic authentication is asked for an experiment with
the client's credentials, so refused credentials fail at the first step with one line.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shdh.runtime.errors import ConfigError

DEFAULT_EXPERIMENT = "shdh"
URI_ENV = "MLFLOW_TRACKING_URI"  # the store, when set (else the repository's SQLite file)
EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_NAME"  # MLflow's own variable for the experiment's name
ORIGIN_ENV = "DVC_ROOT"  # set by DVC for every stage: the repository the experiment came from
STORE_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlruns"  # beside a SQLite store; what `mlflow ui` serves from the same folder
SQLITE_BUSY_TIMEOUT_S = 300  # a writer waits this long for another's lock before it fails
PROBE_TIMEOUT_S = 10
# The UI opens an experiment of this kind on its runs table (not on the GenAI overview).
KIND_TAG = "mlflow.experimentKind"
KIND = "custom_model_development"
USERNAME_ENV = "MLFLOW_TRACKING_USERNAME"
PASSWORD_ENV = "MLFLOW_TRACKING_PASSWORD"
_TEMP_WORKSPACES = (".dvc", "tmp", "exps")  # DVC's temporary copies live in ROOT/.dvc/tmp/exps

log = logging.getLogger(__name__)
_ready: dict[tuple[str, str], str] = {}  # (store, experiment name) -> experiment id


class TrackingUnavailableError(RuntimeError):
    """The tracking server does not answer, or refuses the client's credentials."""


def origin_root() -> Path:
    """The repository a run came from: DVC_ROOT under DVC (the original repository, also for a
    queued or --temp experiment), else the working directory; a folder inside DVC's temporary
    workspaces is mapped back to the repository that holds them."""
    start = Path(os.environ.get(ORIGIN_ENV) or Path.cwd()).resolve()
    parts = start.parts
    n = len(_TEMP_WORKSPACES)
    for i in range(len(parts) - n):
        if parts[i : i + n] == _TEMP_WORKSPACES:
            return Path(*parts[:i])
    return start


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, else the SQLite store of the repository the run came from; a
    relative SQLite path is anchored at that repository, never at a temporary workspace."""
    uri = os.environ.get(URI_ENV) or f"sqlite:///{STORE_FILE}"
    if urllib.parse.urlsplit(uri).scheme in ("", "file"):
        # MLflow 3 has frozen its file store: a run there fails deep in the client
        raise ConfigError(
            f"{URI_ENV}={uri}: a file store, which MLflow no longer takes new runs into; use a "
            f"database (sqlite:///PATH/mlflow.db; unset, sqlite:///{STORE_FILE} here) or a "
            "tracking server (http://HOST:5000)"
        )
    path = sqlite_path(uri)
    if path is not None and not path.is_absolute():
        return f"sqlite:///{origin_root() / path}"
    return uri


def sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite:/// URI (relative as written), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(urllib.parse.urlsplit(uri).path[1:] or ":memory:")


def client_uri(uri: str) -> str:
    """The URI MLflow's client opens: a SQLite store with a busy timeout, so concurrent writers
    wait for each other instead of failing."""
    if sqlite_path(uri) is None or "timeout=" in uri:
        return uri
    return f"{uri}{'&' if '?' in uri else '?'}timeout={SQLITE_BUSY_TIMEOUT_S}"


def experiment_name() -> str:
    """MLFLOW_EXPERIMENT_NAME when set (on a cluster: the ConfigMap shdh-config), else shdh."""
    return os.environ.get(EXPERIMENT_ENV) or DEFAULT_EXPERIMENT


def check_server(uri: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast, naming the URI, when an http(s) tracking server cannot be reached or refuses
    this client's credentials."""
    if not uri.startswith(("http://", "https://")):
        return
    base = uri.rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=timeout) as response:  # noqa: S310
            if response.status >= 500:
                raise TrackingUnavailableError(
                    f"MLflow tracking server {uri} answered HTTP {response.status}"
                )
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise TrackingUnavailableError(
            f"MLflow tracking server {uri} is unreachable ({exc}); set MLFLOW_TRACKING_URI to a "
            f"running server or unset it to track into sqlite:///{STORE_FILE}"
        ) from exc
    _check_credentials(base, uri, timeout)


def _check_credentials(base: str, uri: str, timeout: float) -> None:
    """One authenticated request: /health answers anyone, the REST API only a known user."""
    query = urllib.parse.urlencode({"experiment_name": experiment_name()})
    request = urllib.request.Request(f"{base}/api/2.0/mlflow/experiments/get-by-name?{query}")
    user, password = os.environ.get(USERNAME_ENV), os.environ.get(PASSWORD_ENV)
    if user:
        token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        urllib.request.urlopen(request, timeout=timeout).close()  # noqa: S310 (user URI)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            who = f"the credentials of user '{user}'" if user else "requests without credentials"
            raise TrackingUnavailableError(
                f"MLflow tracking server {uri} refused {who} (HTTP {exc.code}); set "
                f"{USERNAME_ENV} and {PASSWORD_ENV} to an account of that server (on a cluster: "
                "those keys of the Secret shdh-credentials)"
            ) from exc
        # Any other answer (404: no such experiment yet) means the credentials were accepted.
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise TrackingUnavailableError(f"MLflow tracking server {uri}: {exc}") from exc


def configure(experiment: str | None = None) -> Any:
    """Point MLflow at the store and the experiment (created on first use) and return the
    mlflow module; the server probe and the set-up run once per process."""
    uri = tracking_uri()
    name = experiment or experiment_name()
    if (uri, name) not in _ready:
        check_server(uri)  # before importing mlflow, which alone takes seconds
    import mlflow  # lazy: importing shdh must stay cheap and side-effect free

    # Bound MLflow's own HTTP retries too, so a server that dies mid-run also fails quickly.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    mlflow.set_tracking_uri(client_uri(uri))
    # MLflow exports the URI it is given for the processes it starts; export the store's own
    # (absolute) URI instead, so that this process and its children name the store as
    # tracking_uri() does, whatever spelling the client opened it with.
    os.environ[URI_ENV] = uri
    if (uri, name) not in _ready:
        with _setup_lock(uri):
            _ready[(uri, name)] = ensure_experiment(mlflow.MlflowClient(), name, uri)
    mlflow.set_experiment(experiment_id=_ready[(uri, name)])
    return mlflow


def experiment_id(experiment: str | None = None) -> str:
    """The id of the experiment runs go to (configure's), created on first use."""
    configure(experiment)
    return _ready[(tracking_uri(), experiment or experiment_name())]


def ensure_experiment(client: Any, name: str, uri: str) -> str:
    """The id of experiment `name`, created as a model-training experiment when missing, its
    artifacts beside a SQLite store (MLflow's default is the working directory, which for a
    queued experiment is a temporary copy)."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is None:
        path = sqlite_path(uri)
        location = (path.parent / ARTIFACTS_DIR).as_uri() if path is not None else None
        try:
            return client.create_experiment(name, artifact_location=location, tags={KIND_TAG: KIND})
        except MlflowException:  # created by another client meanwhile (a server takes no lock)
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    if found.lifecycle_stage == "deleted":
        raise ValueError(
            f"MLflow experiment '{name}' at {uri} is deleted: restore it (`mlflow "
            f"experiments restore`) or set {EXPERIMENT_ENV} to another name"
        )
    return found.experiment_id


@contextlib.contextmanager
def _setup_lock(uri: str) -> Iterator[None]:
    """Serialise the first set-up of a SQLite store across processes; switch it to WAL."""
    path = sqlite_path(uri)
    if path is None or str(path) == ":memory:":
        yield
        return
    import fcntl
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with contextlib.closing(sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S)) as db:
                db.execute("PRAGMA journal_mode=WAL")  # persistent: readers stop blocking writers
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
