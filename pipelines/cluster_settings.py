"""The cluster's settings for the pipeline's tasks: the ConfigMap `shdh-pipeline` of k8s/.

Sizes, retries, timeouts, loop caps and GPU scheduling are part of a compiled pipeline, not of a
running pod, so the compiler reads them, from the overlay the user names (`--overlay dev`,
rendered with `kubectl kustomize`, the same objects `kubectl apply -k` applies) or from a file
holding the ConfigMap (`--settings`: the overlay rendered, or `kubectl get configmap shdh-pipeline
-o yaml` from the cluster). Keys are flat, so an overlay patches only the ones it changes:

    STEP.cpu_request / .cpu_limit / .memory_request / .memory_limit   a Kubernetes quantity, for
        STEP one of STEPS, or `default` for every step without its own
    train.accelerator_type / .accelerator_limit   the extended resource per train task
        (nvidia.com/gpu, 1); none ("" and 0) trains on the CPU
    train.node_selector / .tolerations            JSON: node labels, Kubernetes Tolerations
    train.retries / .retry_backoff / .retry_backoff_factor / .retry_backoff_max   a failed
        (preempted, evicted) train task is retried after the backoff, which grows by the factor
    train.timeout                                 each try's deadline (the pod's
        activeDeadlineSeconds), a duration such as 90m or 6h
    train.parallelism / baseline.parallelism      how many deep / shallow fit tasks run at once
    image_pull_secrets                            optional: Secrets (comma-separated names) every
        task's pod pulls the images with, for a private registry; none by default
    deploy.service_url                            optional: the search service's address inside
        the cluster (http://shdh-search:8000); set, the DAG ends with a deploy task that copies
        the new index to the service's S3 prefix and reloads it; unset or empty, no deploy task
    deploy.token_secret                           the Secret holding the service's token (key
        `token`) for the deploy task; default shdh-search-token

Every error names where the settings came from and the key.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SETTINGS_CONFIG_MAP = "shdh-pipeline"
OVERLAYS = Path("overlays")  # under the cluster's manifests (shdh.kfp.manifests())
DEFAULT_OVERLAY = "dev"
# The pipeline's components, by name (the function names in components/).
STEPS = (
    "prepare",
    "tree",
    "smatrix",
    "start",
    "features",
    "train",
    "trainjob",  # the task that launches a fit's TrainJob (train.nodes > 1) and waits
    "baseline",
    "evaluate",
    "report",
    "register",
    "index",
    "deploy",  # only with deploy.service_url
)
DEFAULT_TOKEN_SECRET = "shdh-search-token"
RESOURCE_KEYS = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")
LOOPS = ("train", "baseline")
_TRAIN_KEYS = (
    "accelerator_type",
    "accelerator_limit",
    "node_selector",
    "tolerations",
    "retries",
    "retry_backoff",
    "retry_backoff_factor",
    "retry_backoff_max",
    "timeout",
)
_TOLERATION_FIELDS = {
    "key": "key",
    "operator": "operator",
    "value": "value",
    "effect": "effect",
    "tolerationSeconds": "toleration_seconds",
}
_CPU = re.compile(r"([0-9]*\.)?[0-9]+m?")  # what kfp's set_cpu_* accept
_MEMORY = re.compile(r"[0-9]+(E|Ei|P|Pi|T|Ti|G|Gi|M|Mi|K|Ki)?")  # what kfp's set_memory_* accept
_DURATION = re.compile(r"([0-9]+)([smhd])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_QUANTITY = {
    "": 1.0,
    "m": 1e-3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


class SettingsError(ValueError):
    """The cluster settings are missing, unreadable or hold a bad value."""


@dataclass(frozen=True)
class Resources:
    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str


@dataclass(frozen=True)
class Retry:
    retries: int
    backoff_seconds: int
    factor: float
    max_backoff_seconds: int


@dataclass(frozen=True)
class Deploy:
    """Where the deploy task sends the new index: the service's URL and its token's Secret."""

    service_url: str
    token_secret: str


@dataclass(frozen=True)
class ClusterSettings:
    """Everything the compiler puts on the tasks for one cluster; `source` names its origin."""

    source: str
    resources: dict[str, Resources]  # for every step of STEPS
    retry: Retry
    timeout_seconds: int
    parallelism: dict[str, int]  # for the fit tasks of every step of LOOPS
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    accelerator_type: str = ""
    accelerator_limit: int = 0
    image_pull_secrets: list[str] = field(default_factory=list)
    deploy: Deploy | None = None  # the deploy task, where deploy.service_url is set

    @property
    def gpu(self) -> bool:
        return bool(self.accelerator_type)

    @property
    def device(self) -> str:
        """What the train step's `device` setting must be on these nodes."""
        return "cuda" if self.gpu else "cpu"

    def toleration_arguments(self) -> list[dict[str, Any]]:
        """The tolerations as keyword arguments of kfp-kubernetes add_toleration."""
        return [{_TOLERATION_FIELDS[k]: v for k, v in t.items()} for t in self.tolerations]


# --------------------------------------------------------------------------- where they come from


def overlay_names(manifests: Path) -> list[str]:
    return sorted(p.parent.name for p in (manifests / OVERLAYS).glob("*/kustomization.yaml"))


def overlay_dir(name: str, manifests: Path) -> Path:
    """An overlay of the manifests (k8s/) by name, or any folder with a kustomization.yaml."""
    named = manifests / OVERLAYS / name
    for candidate in (named, Path(name)):
        if (candidate / "kustomization.yaml").is_file():
            return candidate
    known = ", ".join(overlay_names(manifests)) or "none"
    raise SettingsError(
        f"--overlay {name}: no such overlay; {manifests / OVERLAYS} has {known} "
        "(or give a folder with a kustomization.yaml)"
    )


def settings_from_overlay(name: str, manifests: Path) -> ClusterSettings:
    """Render the overlay as `kubectl apply -k` would and read its ConfigMap shdh-pipeline."""
    folder = overlay_dir(name, manifests)
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise SettingsError(
            f"--overlay {name}: rendering {folder} needs kubectl on the PATH; "
            "install it, or give --settings FILE with the ConfigMap "
            f"{SETTINGS_CONFIG_MAP}"
        )
    done = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SettingsError(f"--overlay {name}: kubectl kustomize {folder} failed: {last}")
    return parse_settings(list(yaml.safe_load_all(done.stdout)), f"overlay {name}")


def settings_from_file(path: str | Path) -> ClusterSettings:
    """The ConfigMap in a YAML or JSON file: one object, a stream, or a `kind: List`."""
    path = Path(path)
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"{path}: cannot read the cluster settings: {exc}") from exc
    return parse_settings(documents, str(path))


def find_config_map(documents: list[Any], source: str) -> dict[str, str]:
    objects: list[dict] = []
    for doc in documents:
        if isinstance(doc, dict):
            objects += doc.get("items") or [] if doc.get("kind") == "List" else [doc]
    found = [
        o
        for o in objects
        if o.get("kind") == "ConfigMap"
        and (o.get("metadata") or {}).get("name") == SETTINGS_CONFIG_MAP
    ]
    if len(found) != 1:
        raise SettingsError(
            f"{source}: expected one ConfigMap named {SETTINGS_CONFIG_MAP}, found {len(found)}"
        )
    data = found[0].get("data") or {}
    return {str(k): str(v) for k, v in data.items()}


# --------------------------------------------------------------------------- what they say


def parse_settings(documents: list[Any], source: str) -> ClusterSettings:
    """Validate the ConfigMap's data; every error names `source` and the key."""
    data = find_config_map(documents, source)
    keys = _Keys(data, source)
    keys.refuse_unknown()
    settings = ClusterSettings(
        source=source,
        resources={step: _resources(keys, step) for step in STEPS},
        retry=Retry(
            keys.integer("train.retries", minimum=0),
            keys.duration("train.retry_backoff"),
            keys.number("train.retry_backoff_factor", minimum=1.0),
            keys.duration("train.retry_backoff_max"),
        ),
        timeout_seconds=keys.duration("train.timeout"),
        parallelism={loop: keys.integer(f"{loop}.parallelism", minimum=1) for loop in LOOPS},
        node_selector=keys.json_value("train.node_selector", dict),
        tolerations=keys.json_value("train.tolerations", list),
        accelerator_type=data.get("train.accelerator_type", ""),
        accelerator_limit=keys.integer("train.accelerator_limit", minimum=0),
        image_pull_secrets=keys.names("image_pull_secrets"),
        deploy=_deploy(keys),
    )
    _check_consistency(keys, settings)
    return settings


class _Keys:
    """The ConfigMap's values, read and checked one key at a time."""

    def __init__(self, data: dict[str, str], source: str) -> None:
        self.data, self.source = data, source

    def fail(self, key: str, problem: str) -> SettingsError:
        return SettingsError(
            f"{self.source}: ConfigMap {SETTINGS_CONFIG_MAP} data.{key}: {problem}"
        )

    def refuse_unknown(self) -> None:
        known = {f"{s}.{r}" for s in ("default", *STEPS) for r in RESOURCE_KEYS}
        known |= {f"train.{k}" for k in _TRAIN_KEYS} | {f"{loop}.parallelism" for loop in LOOPS}
        known |= {"image_pull_secrets", "deploy.service_url", "deploy.token_secret"}
        for key in self.data:
            if key not in known:
                raise self.fail(key, "not a setting (a typo?); see pipelines/cluster_settings.py")

    def names(self, key: str) -> list[str]:
        """An optional comma-separated list of Kubernetes object names."""
        names = [n.strip() for n in self.data.get(key, "").split(",") if n.strip()]
        for name in names:
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", name):
                raise self.fail(key, f"{name!r} is not a Kubernetes object name")
        return names

    def value(self, key: str) -> str:
        if key not in self.data:
            raise self.fail(key, "missing")
        return self.data[key].strip()

    def integer(self, key: str, minimum: int) -> int:
        text = self.value(key)
        if not re.fullmatch(r"[0-9]+", text) or int(text) < minimum:
            raise self.fail(key, f"expected a whole number >= {minimum}, got {text!r}")
        return int(text)

    def number(self, key: str, minimum: float) -> float:
        text = self.value(key)
        try:
            number = float(text)
        except ValueError:
            number = float("nan")
        if not number >= minimum:
            raise self.fail(key, f"expected a number >= {minimum}, got {text!r}")
        return number

    def duration(self, key: str) -> int:
        match = _DURATION.fullmatch(self.value(key))
        if match is None or int(match[1]) == 0:
            raise self.fail(
                key, f"expected a duration such as 90s, 30m, 6h or 1d, got {self.value(key)!r}"
            )
        return int(match[1]) * _SECONDS[match[2]]

    def json_value(self, key: str, kind: type) -> Any:
        text = self.value(key)
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise self.fail(key, f"not valid JSON ({exc}): {text!r}") from exc
        if not isinstance(parsed, kind):
            raise self.fail(key, f"expected a JSON {kind.__name__}, got {text!r}")
        return parsed


def _resources(keys: _Keys, step: str) -> Resources:
    """A step's CPU and memory bounds: its own keys, else the default's; a request above its
    limit fails."""
    values = {}
    for name in RESOURCE_KEYS:
        key = f"{step}.{name}" if f"{step}.{name}" in keys.data else f"default.{name}"
        text = keys.value(key)
        pattern = _CPU if name.startswith("cpu") else _MEMORY
        if not pattern.fullmatch(text) or quantity(text) <= 0:
            raise keys.fail(
                key,
                f"not a positive Kubernetes {name.split('_')[0]} quantity "
                f"(e.g. 500m, 2, 1Gi): {text!r}",
            )
        values[name] = text
    for kind in ("cpu", "memory"):
        request, limit = values[f"{kind}_request"], values[f"{kind}_limit"]
        if quantity(request) > quantity(limit):
            raise keys.fail(f"{step}.{kind}_request", f"{request} is above the limit {limit}")
    return Resources(**values)


def _deploy(keys: _Keys) -> Deploy | None:
    """The deploy task's settings, or None where no service URL is given (no deploy task)."""
    url = keys.data.get("deploy.service_url", "").strip()
    if not url:
        if keys.data.get("deploy.token_secret", "").strip():
            raise keys.fail("deploy.token_secret", "set without deploy.service_url")
        return None
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise keys.fail("deploy.service_url", f"expected http(s)://HOST[:PORT], got {url!r}")
    secrets = keys.names("deploy.token_secret") or [DEFAULT_TOKEN_SECRET]
    if len(secrets) != 1:
        raise keys.fail("deploy.token_secret", f"expected one Secret name, got {secrets}")
    return Deploy(url.rstrip("/"), secrets[0])


def _check_consistency(keys: _Keys, settings: ClusterSettings) -> None:
    """What no single key shows: node labels are strings, tolerations have known fields, a GPU
    type comes with a count, and a retry can start after a try has run to its deadline."""
    if any(not isinstance(v, str) for v in settings.node_selector.values()):
        raise keys.fail("train.node_selector", "label values must be strings")
    for t in settings.tolerations:
        if not isinstance(t, dict) or not set(t) <= set(_TOLERATION_FIELDS):
            raise keys.fail(
                "train.tolerations",
                f"each must be an object with keys among {sorted(_TOLERATION_FIELDS)}, got {t!r}",
            )
    if bool(settings.accelerator_type) != (settings.accelerator_limit > 0):
        raise keys.fail(
            "train.accelerator_limit",
            f"{settings.accelerator_limit} for "
            f"accelerator_type {settings.accelerator_type!r} (at least 1 with "
            "a type, 0 without)",
        )
    if settings.retry.max_backoff_seconds < settings.timeout_seconds:
        raise keys.fail(
            "train.retry_backoff_max",
            "shorter than train.timeout: no retry may start that late, so a try that runs to "
            "its deadline would never be retried",
        )


def quantity(text: str) -> float:
    """A Kubernetes quantity ("250m", "2", "1Gi") in base units."""
    match = re.fullmatch(r"([0-9]*\.?[0-9]+)([a-zA-Z]*)", text)
    if match is None or match[2] not in _QUANTITY:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(match[1]) * _QUANTITY[match[2]]
