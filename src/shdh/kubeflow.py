"""The Kubeflow front door's shared code: the pipeline's parameters from params.yaml, and the
glue the components call inside their containers.

A component's body is serialised alone into the pipeline YAML and runs in the project's image,
so whatever two components share must live in the installed package: here. The DAG
(pipelines/) and `shdh pipeline` (shdh.commands.pipeline) import this module; it imports
neither, so the front door has no import cycle.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shdh import settings
from shdh.plan.overrides import apply_overrides
from shdh.runtime.atomic import atomic_dir
from shdh.runtime.json_files import read_json_object
from shdh.settings import sections
from shdh.settings.profiles import (
    PROFILES_DIR,
    ConfigError,
    deep_merge,
    load_params,
    merge_layers,
    profile_layers,
    setter,
)

log = logging.getLogger(__name__)

# The params.yaml sections that become pipeline parameters, one each (plus seed and profile).
SECTIONS = tuple(sections.SECTIONS)


def resolve_params(
    params_file: str | Path = "params.yaml",
    profile: str | None = None,
    overrides: Iterable[str] = (),
    profiles_dir: str | Path = PROFILES_DIR,
) -> dict[str, Any]:
    """params.yaml, with a profile's overrides and then `--set KEY=VALUE` ones applied
    (shdh.plan.overrides).

    The same values `shdh profile apply P` would write into params.yaml, without rewriting it.
    Every key set must already exist in params.yaml, so a typo fails here, by name.
    """
    params = load_params(params_file)
    if profile:
        layers = profile_layers(profile, profiles_dir)
        extra = merge_layers(layers)
        _check_known(params, extra, layers)
        params = deep_merge(params, {**extra, "profile": profile})
    given = [f"profile {profile}"] if profile else []
    params = apply_overrides(params, overrides)
    given += [f"--set {text}" for text in overrides]
    # a bad value may be the file's, the profile's or an override's: name all that made it
    source = f"{params_file} with {', '.join(given)}" if given else str(params_file)
    return settings.validate(params, source).params


def _check_known(
    base: dict[str, Any], extra: dict[str, Any], layers: list[tuple[Path, Any]], prefix: str = ""
) -> None:
    """Every key a profile sets is params.yaml's; a stray one is named with the profile file
    (of the chain it extends) that sets it."""
    for key, value in extra.items():
        if key not in base:
            where = setter(layers, f"{prefix}{key}")
            raise ConfigError(f"{where}: sets unknown key '{prefix}{key}' (not in params.yaml)")
        if isinstance(value, dict) and isinstance(base[key], dict):
            _check_known(base[key], value, layers, f"{prefix}{key}.")


def pipeline_arguments(params: dict[str, Any]) -> dict[str, Any]:
    """The pipeline's parameters: seed, profile and one JSON string per params.yaml section.

    Sections travel as JSON strings, not dicts: Kubeflow stores dict parameters as protobuf
    Structs, which turn every int into a float (epochs 1 -> 1.0, "shdh-16.0") and cannot hold
    null (max_items, n_train), so a dict would not reach the library as params.yaml wrote it.
    """
    return {
        "profile": str(params.get("profile") or ""),
        "seed": int(params["seed"]),
        **{name: json.dumps(params[name], sort_keys=True) for name in SECTIONS},
    }


def cluster_data_version(params: dict[str, Any]) -> str:
    """The raw data's version a cluster run pulls: data.dvc and .dvc/config of the DVC project
    the command runs in (the nearest folder at or above the working directory with a data.dvc;
    shdh.steps.dvc_pull.data_version). Outside one, the run can only download from data.sources,
    which data.download_fallback must allow: said, not guessed."""
    from shdh.steps import dvc_pull

    here = Path.cwd()
    root = next((d for d in (here, *here.parents) if (d / dvc_pull.DVC_FILE).is_file()), None)
    if root is not None:
        return dvc_pull.data_version(root)
    if params["data"].get("download_fallback"):
        log.warning(
            "no %s at or above %s: the run's prepare step downloads from data.sources",
            dvc_pull.DVC_FILE,
            here,
        )
        return ""
    raise ConfigError(
        f"shdh pipeline: no {dvc_pull.DVC_FILE} at or above {here}: a cluster run pulls the raw "
        "data's DVC version; run from your DVC project, or set data.download_fallback: true "
        "(e.g. --set data.download_fallback=true) to download from data.sources"
    )


def section_arg(text: str, name: str) -> dict[str, Any]:
    """A params.yaml section passed as a pipeline parameter (JSON; see pipeline_arguments),
    validated as `shdh` validates params.yaml before the component does any work."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"pipeline parameter '{name}': not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"pipeline parameter '{name}': expected a JSON object, got {text!r}")
    settings.validate_section(name, value, f"pipeline parameter '{name}'")
    return value


NO_OWN_SEED = -1  # a fit's own seed without a `seeds` list: the master seed, unnamed


def branch_runs(train: dict[str, Any], baselines: dict[str, Any], kind: str) -> list[dict]:
    """The {method, bits, own_seed} fits of one branch of the DAG, in the plan's order (the
    order the score step scores them; shdh.plan.all_methods.planned_runs, which also skips KMH where
    it cannot run): "deep" are train.methods x train.bits (x train.seeds), "shallow"
    baselines.methods x baselines.bits (x baselines.seeds). A pipeline parameter cannot be
    null, so a fit without a seed of its own has own_seed NO_OWN_SEED."""
    from shdh.plan.all_methods import planned_runs

    none = {"methods": [], "bits": []}
    if kind == "deep":
        runs = planned_runs({"train": train, "baselines": none})
    elif kind == "shallow":
        runs = planned_runs({"train": none, "baselines": baselines})
    else:
        raise ValueError(f"plan: kind must be 'deep' or 'shallow', got '{kind}'")
    return [
        {"method": str(m), "bits": int(b), "own_seed": NO_OWN_SEED if s is None else int(s)}
        for m, b, s in runs
    ]


def own_seed_arg(value: int) -> int | None:
    """A fit's own seed as the plan takes it: NO_OWN_SEED -> None."""
    return None if int(value) == NO_OWN_SEED else int(value)


KUBEFLOW_SOURCE = "kubeflow-pipelines:shdh"  # the source name of Kubeflow's runs in the UI


def run_context(
    metadata: dict[str, Any],
    profile: str,
    pipeline_run_id: str,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The MLflow tags and parent run of a Kubeflow run: the same tags as a DVC run's, with
    the dataset and raw-data hash that `prepare` put in the prepared artifact's metadata.
    The start step passes its `settings`: it creates the parent (they become its params) or
    reopens it; every later step only finds it."""
    from shdh.tracking import mlflow_runs as tracking
    from shdh.tracking import parent_run

    missing = [k for k in ("dataset", "dvc_data_md5") if k not in metadata]
    if missing:
        raise ValueError(
            f"the prepared dataset artifact's metadata lacks {missing} (written by the prepare "
            "component)"
        )
    tags = {
        "dataset": str(metadata["dataset"]),
        "profile": profile,
        "dvc_data_md5": str(metadata["dvc_data_md5"]),
        **tracking.source_tags(KUBEFLOW_SOURCE, "JOB"),
    }
    return parent_run.pipeline_context(pipeline_run_id, tags, settings, reopen=settings is not None)


def pipeline_settings(seed: int, profile: str, sections: dict[str, str]) -> dict[str, Any]:
    """The pipeline's parameters as one settings dict, the layout of params.yaml."""
    return {
        "profile": profile,
        "seed": seed,
        **{name: section_arg(text, name) for name, text in sections.items()},
    }


def save_model(model_dir: str | Path, model: Any) -> None:
    """Copy a fitted model folder (shdh.plan.fits: models_root/METHOD/NAME) into a Model output
    artifact.

    The training work folder (the checkpoint, already logged to MLflow) stays behind.
    """
    from shdh.plan.fits import FIT_RECORD, WORK_DIR

    model_dir = Path(model_dir)
    record = read_json_object(model_dir / FIT_RECORD, "the fit record")
    with atomic_dir(model.path) as tmp:
        shutil.copytree(model_dir, tmp, ignore=shutil.ignore_patterns(WORK_DIR), dirs_exist_ok=True)
    model.metadata.update(
        {"method": record["method"], "bits": int(record["bits"]), "own_seed": record["own_seed"]}
    )


def fit_component(
    *,
    prepared: Any,
    similarity: Any,
    method: str,
    bits: int,
    own_seed: int,
    settings: str,
    seed: int,
    profile: str,
    pipeline_run_id: str,
    model: Any,
    gist: Any = None,
) -> None:
    """The train and baseline components' work: the planned fit (shdh.plan.all_methods), trained by
    the fit runner as `shdh train` and `shdh baselines` train it, its folder copied into the Model
    artifact. A deep fit resumes a matching checkpoint, and with SHDH_CHECKPOINT_URL set keeps
    every epoch's in the object store under the fit's name (shdh.tracking.checkpoint_sync), so that
    a retried task resumes there. A shallow fit (gist given) fits the GIST features."""
    import tempfile

    from shdh.plan.all_methods import fit_plan

    section = section_arg(settings, "train" if gist is None else "baselines")
    if gist is None:
        from shdh.plan.processes import refuse_several_processes

        refuse_several_processes(section, "the train component")
    with tempfile.TemporaryDirectory(prefix="shdh-models-") as models_dir:
        plan = fit_plan(
            section,
            method,
            bits,
            own_seed_arg(own_seed),
            seed=seed,
            models_root=models_dir,
        )
        inputs = {"prepared_dir": prepared.path, "smatrix_path": similarity.path}
        if gist is None:
            from shdh.steps.fit_deep import fit
            from shdh.tracking import checkpoint_sync

            checkpoints = checkpoint_sync.from_env(pipeline_run_id, plan.name)
            context = run_context(prepared.metadata, profile, pipeline_run_id)
            out = fit(
                plan, **inputs, progress=False, resume="auto", checkpoints=checkpoints, **context
            )
        else:
            from shdh.steps.fit_shallow import fit

            context = run_context(prepared.metadata, profile, pipeline_run_id)
            out = fit(plan, **inputs, features_path=gist.path, **context)
        save_model(out, model)


def gather_models(models: Iterable[Any], models_dir: str | Path) -> Path:
    """Lay Model artifacts out as the plan places them (models_dir/METHOD/NAME), by links."""
    from shdh.plan.fits import FIT_RECORD, model_dir

    models_dir = Path(models_dir)
    for model in models:
        path = Path(model.path) / FIT_RECORD
        try:
            record = json.loads(path.read_text())
            own_seed = record["own_seed"]
            link = model_dir(models_dir, record["method"], int(record["bits"]), own_seed)
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"{path}: not a fitted model's record: {exc}") from exc
        if link.exists():
            raise ValueError(f"two model artifacts are both {link.name} ({model.path})")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path(model.path).resolve(), target_is_directory=True)
    return models_dir


def kfp_metrics(scores: dict[str, Any], n: int) -> dict[str, float]:
    """The @n metrics of every method and code length, named METHOD_BITS_METRIC for the UI."""
    from shdh.tracking.mlflow_runs import metric_key

    return {
        f"{method}_{bits}_{metric_key(name)}": float(value)
        for method, by_bits in scores.items()
        for bits, row in by_bits.items()
        for name, value in row.items()
        if name.endswith(f"@{n}")
    }


def fit_name(run: dict[str, Any]) -> str:
    """A {method, bits, own_seed} fit's name (shdh.plan.fits.fit_name): its model folder's, its
    MLflow run's and its checkpoints' in the store."""
    from shdh.plan import fits

    return fits.fit_name(str(run["method"]), int(run["bits"]), own_seed_arg(run["own_seed"]))


def evaluate_fits(
    *,
    prepared: Any,
    similarity: Any,
    runs: list[dict[str, Any]],
    models: list[Any],
    settings: str,
    seed: int,
    profile: str,
    pipeline_run_id: str,
    results: Any,
    metrics: Any,
    gist: Any = None,
) -> None:
    """The evaluate component's work: score the fitted `models` of the planned `runs` (shdh
    evaluate), log the metrics to each model's MLflow run, write the results table, scores and
    figures onto the pipeline's parent run and close it; the @n metrics go to `metrics` for the
    Kubeflow UI. Here rather than in the component, whose signature is made per plan."""
    import tempfile

    from shdh.plan.fits import make_fit
    from shdh.reporting.parent_summary import summarize
    from shdh.steps.score import score
    from shdh.tracking.mlflow_runs import end_parent, failure_ends

    cfg = {**section_arg(settings, "evaluate"), "report": None}  # the report step writes it
    context = run_context(prepared.metadata, profile, pipeline_run_id)
    with failure_ends(context["parent_run_id"]), tempfile.TemporaryDirectory() as models_dir:
        root = gather_models(models, models_dir)
        fits = [
            make_fit(  # the fit as the score step sees it: its name and its model's folder
                r["method"],
                int(r["bits"]),
                own_seed_arg(r["own_seed"]),
                seed=seed,
                models_root=root,
                params={},
            )
            for r in runs
        ]
        scores = score(
            fits,
            prepared_dir=prepared.path,
            smatrix_path=similarity.path,
            results_dir=results.path,
            eval_params=cfg,
            features_path=gist.path if gist else None,
            **context,
        )
        view = summarize(context["parent_run_id"], results.path, None)  # report adds the report
    end_parent(context["parent_run_id"])  # the pipeline's last tracked step
    print(f"the methods compared in the MLflow UI: {view}")
    for name, value in kfp_metrics(scores, cfg["n"]).items():
        metrics.log_metric(name, value)
