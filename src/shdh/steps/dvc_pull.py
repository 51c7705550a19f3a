"""The raw data of the version data.dvc records, pulled from the project's DVC remote: how a
pipeline step without a checkout gets exactly the data that `dvc repro` uses.

When the pipeline is compiled, the checkout's data.dvc and .dvc/config become one argument of
the prepare step (`data_version`). Only the committed config goes in, never .dvc/config.local,
where credentials belong; a committed config that holds credentials is refused, since the
pipeline YAML would carry them to the cluster. The step writes both files into an empty DVC
project of its own (no git) and runs `dvc pull`, which fetches the objects of that md5 and
checks their hashes. Credentials come from the environment (AWS_ACCESS_KEY_ID, ...);
AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, when set (the ConfigMap shdh-config on a cluster),
replaces the remote's endpointurl, so that one committed config serves a laptop and the pods.

When the pull fails (no remote, the version not pushed, the store unreachable), the step fails,
naming the remote, the version, what DVC said, `dvc push` and the setting data.download_fallback.
A silent fallback would train on whatever data.sources serves, not on the version the pipeline
was compiled from, so the public download takes over only when that setting says so, with a
warning naming what failed.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shdh.data.dataset_catalogue import dataset_entry
from shdh.data.s3_source import s3_endpoint

log = logging.getLogger(__name__)

DVC_FILE = "data.dvc"
DVC_CONFIG = ".dvc/config"
PUSH_HINT = "push it from a checkout that has the data: `dvc push data.dvc` (docs/cluster-data.md)"
FALLBACK_SETTING = "data.download_fallback"
FALLBACK_HINT = (
    f"To download the raw files from data.sources instead when the pull fails, set "
    f"{FALLBACK_SETTING}: true (params.yaml)"
)
# The loggers DVC and its storage libraries report a failed transfer on: the exception DVC
# raises says only how many files failed, its log says why (missing objects, no such bucket,
# refused keys).
_DVC_LOGGERS = ("dvc", "dvc_data", "dvc_objects", "dvc_s3")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Remote options that hold a secret: they belong in .dvc/config.local, never in the pipeline.
_SECRETS = (
    "access_key_id",
    "secret_access_key",
    "session_token",
    "password",
    "account_key",
    "sas_token",
    "client_secret",
    "gdrive_client_secret",
    "token",
)


class DataVersionError(RuntimeError):
    """The data version cannot be pulled: no remote, not pushed, or the remote unreachable."""


@dataclass(frozen=True)
class RawData:
    path: Path  # data.raw_dir, inside the scratch folder (where it is, for "local")
    md5: str  # the DVC hash of the tracked folder, as data.dvc records it
    source: str  # "dvc" (pulled), "download" (the public download) or "local" (your own data)


def data_version(root: str | Path = ".") -> str:
    """data.dvc and .dvc/config of the checkout at root, as the prepare step's JSON argument."""
    root = Path(root)
    texts = {}
    for key, name in (("dvc_file", DVC_FILE), ("dvc_config", DVC_CONFIG)):
        try:
            texts[key] = (root / name).read_text()
        except OSError as exc:
            raise DataVersionError(f"{root / name}: cannot read it: {exc}") from exc
    tracked_path(texts["dvc_file"], str(root / DVC_FILE))
    remote = default_remote(committed_config(root / ".dvc"), str(root / DVC_CONFIG))
    if remote is None:
        log.warning(
            "%s names no default DVC remote, so the pipeline's prepare step will fail "
            "(or, with %s: true, download from data.sources); add one (`dvc remote add -d`) "
            "and `dvc push data.dvc`",
            root / DVC_CONFIG,
            FALLBACK_SETTING,
        )
    return json.dumps(texts, sort_keys=True)


def tracked_path(dvc_file: str, where: str) -> tuple[str, str]:
    """(path, md5) of the one folder a .dvc file tracks."""
    try:
        out = yaml.safe_load(dvc_file)["outs"][0]
        return str(out["path"]), str(out["md5"])
    except (yaml.YAMLError, KeyError, IndexError, TypeError) as exc:
        raise DataVersionError(f"{where}: expected outs[0] with path and md5 ({exc!r})") from exc


def default_remote(config: dict[str, Any], where: str) -> tuple[str, dict[str, Any]] | None:
    """(name, settings) of the config's default remote, or None; refuses credentials in it."""
    name = (config.get("core") or {}).get("remote")
    remotes = config.get("remote") or {}
    for remote, settings in remotes.items():
        secrets = sorted(set(settings) & set(_SECRETS))
        if secrets:
            raise DataVersionError(
                f"{where}: remote '{remote}' holds {secrets}; move them to .dvc/config.local "
                f"(`dvc remote modify --local {remote} OPTION VALUE`) or the environment"
            )
    if not name:
        return None
    if name not in remotes:
        raise DataVersionError(f"{where}: core.remote is '{name}', which is not a remote there")
    return name, remotes[name]


def committed_config(dvc_dir: str | Path) -> dict[str, Any]:
    """The project-level DVC config of dvc_dir (its `config`, without config.local)."""
    from dvc.config import Config

    return Config(dvc_dir=str(dvc_dir), validate=False).load_one("repo")


def pull(version: str, dest: str | Path) -> Path:
    """`dvc pull` the folder `version` (data_version's JSON) records into dest, an empty
    scratch folder made a DVC project; returns the pulled folder (dest/PATH)."""
    from dvc.exceptions import CheckoutError, DownloadError, DvcException
    from dvc.repo import Repo

    files = _parse(version)
    dest = Path(dest)
    path, md5 = tracked_path(files["dvc_file"], f"data_version's {DVC_FILE}")
    Repo.init(str(dest), no_scm=True)
    (dest / DVC_CONFIG).write_text(files["dvc_config"])
    (dest / DVC_FILE).write_text(files["dvc_file"])
    remote = default_remote(committed_config(dest / ".dvc"), f"data_version's {DVC_CONFIG}")
    if remote is None:
        raise DataVersionError(
            f"{DVC_CONFIG} names no default DVC remote, so data version {md5} "
            f"cannot be pulled; add one (`dvc remote add -d`), then {PUSH_HINT}"
        )
    name, settings = remote
    where = f"the DVC remote '{name}' ({settings.get('url')})"
    _local_config(dest, name)
    with _dvc_log() as said:
        try:
            with Repo(str(dest)) as repo:
                repo.pull(targets=[str(dest / DVC_FILE)])
        except CheckoutError as exc:
            raise DataVersionError(
                f"data version {md5} ({DVC_FILE}) is not in {where}; {PUSH_HINT}. "
                f"DVC said: {_dvc_said(said, exc)}"
            ) from exc
        except DownloadError as exc:
            raise DataVersionError(
                f"data version {md5} ({DVC_FILE}) could not be fetched from {where}; check "
                f"the endpoint and the AWS credentials. DVC said: {_dvc_said(said, exc)}"
            ) from exc
        except DvcException as exc:
            raise DataVersionError(
                f"dvc pull of data version {md5} ({DVC_FILE}) from {where} failed. "
                f"DVC said: {_dvc_said(said, exc)}"
            ) from exc
    log.info("pulled data version %s from %s", md5, where)
    return dest / path


@contextmanager
def _dvc_log() -> Iterator[list[str]]:
    """The warnings and errors DVC logs inside the block, one line each, in order."""
    said: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                # DVC logs the cause as the record's exception ("Could not connect to ...").
                text = f"{text} - {record.exc_info[1]}"
            said.append(" ".join(_ANSI.sub("", text).split()))

    handler = Collect(logging.WARNING)
    loggers = [logging.getLogger(name) for name in _DVC_LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield said
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def _dvc_said(said: list[str], exc: Exception) -> str:
    """What DVC logged and the text of what it raised, on one line, each once."""
    lines = [*said, " ".join(_ANSI.sub("", str(exc)).split())]
    return " | ".join(dict.fromkeys(line for line in lines if line))


def _parse(version: str) -> dict[str, str]:
    try:
        files = json.loads(version)
    except (TypeError, ValueError) as exc:
        raise DataVersionError(f"the prepare step's data_version: not valid JSON: {exc}") from exc
    if not isinstance(files, dict) or not all(
        isinstance(files.get(k), str) for k in ("dvc_file", "dvc_config")
    ):
        raise DataVersionError(
            "the prepare step's data_version: expected a JSON object with "
            "the texts 'dvc_file' and 'dvc_config' (shdh.steps.dvc_pull)"
        )
    return files


def _local_config(dest: Path, remote: str) -> None:
    """The scratch project's own settings: no git; DVC's site cache inside it (a pod's root
    filesystem may be read-only); the cluster's S3 endpoint where the environment names one."""
    from dvc.config import Config

    endpoint = s3_endpoint()
    with Config(dvc_dir=str(dest / ".dvc"), validate=False).edit("local") as conf:
        conf["core"]["no_scm"] = True
        conf["core"]["site_cache_dir"] = str(dest / ".dvc" / "site-cache")
        if endpoint:
            conf["remote"][remote] = {"endpointurl": endpoint}
            log.info("DVC remote '%s': endpoint %s from the environment", remote, endpoint)


def _own_data(raw_dir: Path, dataset: str) -> RawData:
    """A local run's own data (a folder or table, no data version): read where data.raw_dir
    names it, as `dvc repro` reads it; hashed as DVC would hash it."""
    from shdh.data.download import md5sum
    from shdh.steps.prepare import fetch
    from shdh.tracking.mlflow_runs import dvc_dir_md5

    raw = fetch(raw_dir, dataset=dataset)  # checks that it is there
    log.info("no data version was given (a local run): your own data at %s", raw)
    return RawData(raw, dvc_dir_md5(raw) if raw.is_dir() else md5sum(raw), "local")


def pull_or_fetch(version: str, work: str | Path, data: dict[str, Any]) -> RawData:
    """The raw data for the `data` section: the pulled data version when one is given, else
    (a local run) your own data where data.raw_dir is, or the public download (shdh fetch from
    data.sources), said in the log.

    A pull that fails raises DataVersionError, unless data.download_fallback is true: then the
    public download takes over, with a warning that says what failed.

    The files land at work/RAW_DIR (data.raw_dir without its anchor), the folder data.dvc
    tracks being work/PATH, so that its hash is the one data.dvc records.
    """
    from shdh.steps.prepare import fetch
    from shdh.tracking.mlflow_runs import dvc_dir_md5

    raw_dir = Path(data["raw_dir"]).relative_to(Path(data["raw_dir"]).anchor)
    work = Path(work)
    sources = data.get("sources")
    failure = "no data version was given (a local run)"
    fallback = bool(data.get("download_fallback", False))
    if version:
        try:
            tracked = pull(version, work)
            if not raw_dir.is_relative_to(tracked.relative_to(work)):
                raise DataVersionError(
                    f"data.raw_dir {raw_dir} is not inside the folder "
                    f"{DVC_FILE} tracks ({tracked.relative_to(work)})"
                )
            return RawData(work / raw_dir, dvc_dir_md5(tracked), "dvc")
        except DataVersionError as exc:
            if not fallback:
                raise DataVersionError(f"{exc}. {FALLBACK_HINT}") from exc
            failure = str(exc)
        log.warning(
            "%s; %s is true, so falling back to the public download from data.sources %s",
            failure,
            FALLBACK_SETTING,
            sources,
        )
    elif dataset_entry(data["dataset"]).own:
        return _own_data(Path(data["raw_dir"]), data["dataset"])
    else:
        log.info("%s: the public download from data.sources %s", failure, sources)
    try:
        raw = fetch(
            work / raw_dir,
            dataset=data["dataset"],
            sources=sources,
            verify=data.get("verify", True),
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise DataVersionError(f"{failure}; and the public download failed too: {exc}") from exc
    md5 = dvc_dir_md5(work / raw_dir.parts[0])
    if version and md5 != tracked_path(_parse(version)["dvc_file"], DVC_FILE)[1]:
        log.warning("the downloaded data hashes to %s, not to data.dvc's version", md5)
    return RawData(raw, md5, "download")
