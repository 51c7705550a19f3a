"""Train on one machine, score on another: a bundle exported here, trained in a process that
can import nothing but the core, scored back into the results like the pipeline's own fits."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from shdh.bundle import BundleError, read_bundle, write_bundle
from shdh.cli import main as cli_main
from shdh.commands.evaluate import main as evaluate_main
from shdh.core.codes_file import load_codes, save_codes
from tests.commands.test_steps import run_steps, smoke_params
from tests.conftest import REPO

# What a bare GPU machine lacks: the pipeline's tools, and the libraries only the pipeline's
# data, features and reports need.
BLOCKED = (
    "mlflow",
    "dvc",
    "kfp",
    "boto3",
    "pandas",
    "pyarrow",
    "yaml",
    "ruamel",
    "scipy",
    "PIL",
    "matplotlib",
    "tqdm",
    "sklearn",
    "faiss",
    "requests",
)
CORE = (
    "shdh.training.loop",
    "shdh.bundle",
    "shdh.plan.all_methods",
    "shdh.ranking.exact",
    "shdh.ranking.exact_kernel",
    "shdh.core.metrics",
    "shdh.core.codes_file",
    "shdh.core.batch_pairs",
    "shdh.hashers.shdh",
    "shdh.hashers.dpsh",
    "shdh.plan.overrides",
    "shdh.core.similarity",
    "shdh.core.hierarchy",
    "shdh.core.level_weights",
    "shdh.core.tree_fields",
    "shdh.training.objective",
    "shdh.core.smatrix",
    "shdh.runtime.devices",
    "shdh.nets.cnnf",
    "shdh.nets.hashing",
)
# A None entry in sys.modules makes `import NAME` fail and importlib's find_spec say "absent",
# exactly as on a machine without the package.
BLOCKER = f"""
import sys
sys.modules.update(dict.fromkeys({BLOCKED!r}))
"""


def core_python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter where the blocked modules cannot be imported."""
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_core_imports_and_fits_with_pytorch_alone(tmp_path):
    """Every core module and every hasher imports with the pipeline's tools blocked, and a deep
    fit, its codes and their metrics run there too."""
    code = f"""
import importlib, sys
import numpy as np
for name in {CORE!r}:
    importlib.import_module(name)
from shdh.hashers import hasher_class
from shdh.hashers.method_catalogue import METHODS
for method in METHODS:
    hasher_class(method.name)
from shdh.hashers.shdh import SHDH
from shdh.hashers.supervision import PairSimilarity
from shdh.core.metrics import evaluate
from shdh.ranking.exact import pack_codes
rng = np.random.default_rng(0)
leaf = rng.integers(0, 4, 96)
images = (rng.random((96, 28, 28)) * 255).astype(np.uint8)
anc = np.stack([np.zeros(96, int), 1 + leaf // 2, 3 + leaf], axis=1)
from shdh.training.loop_settings import LoopSettings
hasher = SHDH(n_bits=8, loop=LoopSettings(width=1 / 16, epochs=1, batch_size=32, device="cpu"))
hasher.fit(images, PairSimilarity(anc, [0.0, 2 / 3, 1 / 3], "hierarchical"))
codes = pack_codes(hasher.encode(images))
metrics, _ = evaluate(codes[:16], codes[16:], anc[:16], anc[16:], hasher.segment_sizes(),
                      hasher.segment_weights(), n=10, wr_ns=(10,), curve_max=20)
loaded = sorted(m for m, module in sys.modules.items()
                if module is not None and m.split(".")[0] in {BLOCKED!r})
print("NDCG", metrics["ndcg@10"], "LOADED", loaded)
"""
    done = core_python(code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stdout
    assert 0 < float(done.stdout.split("NDCG ")[1].split()[0]) <= 1


def _bundle_run(tmp_path: Path, fashion_raw: Path, **train: Any) -> tuple[Path, Path]:
    """Smoke params (SHDH and DPSH at 16 bits unless `train` says otherwise, one thread so that
    processes agree bit for bit), the data steps, and the bundle exported from them."""
    params = smoke_params(
        tmp_path,
        fashion_raw,
        train={"methods": ["shdh", "dpsh"], "num_threads": 1, **train},
        baselines={"methods": []},
    )
    run_steps(params, ["prepare"], ["tree"], ["smatrix"])
    bundle = tmp_path / "bundle.npz"
    run_steps(params, ["bundle", "export", "--out", str(bundle)])
    return params, bundle


@pytest.mark.slow  # end to end: raw data to metrics, by two routes
def test_codes_trained_from_a_bundle_score_as_the_pipelines_own(tmp_path, fashion_raw):
    params, bundle = _bundle_run(tmp_path, fashion_raw)
    # The GPU side, on the CPU here: only the core can be imported.
    run = "import runpy; runpy.run_module('shdh.bundle', run_name='__main__')"
    gpu = tmp_path / "gpu"
    done = core_python(run, "train", str(bundle), "--out", str(gpu), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (gpu / "codes").iterdir()) == ["dpsh-16.npz", "shdh-16.npz"]
    record = json.loads((gpu / "fits" / "shdh-16.json").read_text())
    assert record["device"].startswith("cpu") and len(record["history"]) == 2
    # The pipeline's own route: train here, then evaluate.
    run_steps(params, ["train", "--method", "shdh", "dpsh", "--no-progress"])
    run_steps(params, ["evaluate"])
    ours = json.loads((tmp_path / "results" / "metrics.json").read_text())
    # Score the bundle's codes instead of the models, into another results folder.
    moved = smoke_params(
        tmp_path,
        fashion_raw,
        train={"methods": ["shdh", "dpsh"], "num_threads": 1},
        baselines={"methods": []},
        evaluate={"results_dir": str(tmp_path / "results-gpu"), "report": None},
    )
    assert evaluate_main(["--params", str(moved), "--codes-from", str(gpu)]) == 0
    theirs = json.loads((tmp_path / "results-gpu" / "metrics.json").read_text())
    assert theirs == ours  # bit-identical fits, so identical metrics
    for name in ("shdh-16", "dpsh-16"):
        a, b = (
            load_codes(gpu / "codes" / f"{name}.npz"),
            load_codes(tmp_path / "results" / "codes" / f"{name}.npz"),
        )
        assert np.array_equal(a.db_codes, b.db_codes)
    fits = tmp_path / "results-gpu" / "fits"
    assert json.loads((fits / "shdh-16.json").read_text())["device"] == record["device"]
    # Training again keeps what is done: the record matches, nothing retrains.
    again = core_python(run, "train", str(bundle), "--out", str(gpu), cwd=tmp_path)
    assert again.returncode == 0 and "already trained" in again.stderr


def test_codes_of_another_split_are_refused(tmp_path, fashion_raw, caplog):
    params, bundle = _bundle_run(tmp_path, fashion_raw)
    gpu = tmp_path / "gpu"
    train = ["bundle", "train", str(bundle), "--out", str(gpu), "--methods", "shdh"]
    assert cli_main([*train, "--no-progress"]) == 0
    path = gpu / "codes" / "shdh-16.npz"
    good = path.read_bytes()
    codes = load_codes(path)
    codes.db_ids = codes.db_ids[::-1].copy()  # another order of the database: another split
    path.unlink()
    save_codes(path, codes)
    evaluate = ["evaluate", "--params", str(params), "--codes-from"]
    with caplog.at_level("ERROR"):
        assert cli_main([*evaluate, str(gpu)]) == 1
    assert re.search(r"shdh-16\.npz: db_ids differ .*another dataset or split", caplog.text)
    assert not (tmp_path / "results" / "metrics.json").exists()  # nothing scored, no output
    # Good codes beside a broken file: every file is read before the first result is written.
    path.write_bytes(good)
    (gpu / "codes" / "dpsh-16.npz").write_bytes(good[:3000])
    caplog.clear()
    with caplog.at_level("ERROR"):
        assert cli_main([*evaluate, str(gpu)]) == 1
    assert "dpsh-16.npz" in caplog.text and not (tmp_path / "results").exists()
    # A folder that is not there, or holds none of the run's codes, is not silently passed by.
    for folder, problem in (
        (tmp_path / "nowhere", "nowhere: no such folder"),
        (tmp_path / "prepared", "prepared: holds none of this run's codes"),
    ):
        caplog.clear()
        with caplog.at_level("ERROR"):
            assert cli_main([*evaluate, str(folder)]) == 1
        assert problem in caplog.text


def test_a_broken_bundle_is_named_with_its_key(tmp_path, fashion_raw):
    _, bundle = _bundle_run(tmp_path, fashion_raw)
    good = read_bundle(bundle)
    assert good.images.dtype == np.uint8 and good.settings["train"]["methods"] == ["shdh", "dpsh"]
    good.ancestors = good.ancestors[:-1]
    with pytest.raises(BundleError, match=r"bad\.npz: key 'ancestors': expected ints"):
        write_bundle(tmp_path / "bad.npz", good)
    assert not (tmp_path / "bad.npz").exists()
    with np.load(bundle) as data:
        arrays = {k: data[k] for k in data.files if k != "layer_weights"}
    np.savez(tmp_path / "partial.npz", **arrays)
    with pytest.raises(BundleError, match=r"partial\.npz: missing keys \['layer_weights'\]"):
        read_bundle(tmp_path / "partial.npz")


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)
def test_cuda_without_a_gpu_stops_before_any_work(tmp_path, fashion_raw):
    _, bundle = _bundle_run(tmp_path, fashion_raw)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "shdh.bundle",
            "train",
            str(bundle),
            "--out",
            str(tmp_path / "o"),
            "--device",
            "cuda",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 1
    assert "CUDA is not usable here" in done.stderr and "NVIDIA driver" in done.stderr
    assert not (tmp_path / "o").exists()


def test_the_oracle_trains_once_per_seed_from_a_bundle(tmp_path, fashion_raw):
    """As in the pipeline, the classifier oracle's training does not depend on the code length:
    the 24-bit fit continues the 16-bit fit's finished training instead of repeating it."""
    _, bundle = _bundle_run(tmp_path, fashion_raw, methods=["oracle"], bits=[16, 24])
    out = tmp_path / "gpu"
    assert cli_main(["bundle", "train", str(bundle), "--out", str(out), "--no-progress"]) == 0
    first, second = (json.loads((out / "fits" / f"oracle-{b}.json").read_text()) for b in (16, 24))
    assert first["checkpoint_from"] is None and second["checkpoint_from"] == "oracle-16"
    assert second["history"] == first["history"]
    codes = load_codes(out / "codes" / "oracle-24.npz")
    assert codes.n_bits == 24 and len(codes.db_ids) > 0


def test_a_bundle_carries_the_convergence_rule_and_the_graph_switch(tmp_path, fashion_raw):
    """The gpu profile's rule travels in the bundle: a fit from it holds out items, scores them
    every epoch and ends at the plateau (its record has the curve); --no-cuda-graph and
    --no-fused-sgd are recorded in the run's manifest as the settings they override."""
    params, bundle = _bundle_run(
        tmp_path,
        fashion_raw,
        methods=["shdh"],
        bits=[16],
        epochs=6,
        val_size=30,
        schedule="plateau",
        patience=0,
        min_delta=0.5,
        max_decays=0,
        cuda_graph=True,
        fused_sgd=True,
    )
    out = tmp_path / "gpu"
    argv = ["bundle", "train", str(bundle), "--out", str(out), "--no-progress", "--no-cuda-graph"]
    argv.append("--no-fused-sgd")
    assert cli_main(argv) == 0
    history = json.loads((out / "fits" / "shdh-16.json").read_text())["history"]
    # epoch 1 sets the best score; epoch 2 gains less than 0.5, so the lr decays once more than
    # max_decays = 0 allows: the fit ends there, well before the 6-epoch cap
    assert [e["stopped"] for e in history] == [False, True]
    assert all(0 < e["val_ndcg_at_100"] <= 1 for e in history)
    manifest = json.loads((out / "bundle.json").read_text())
    assert manifest["train"]["cuda_graph"] is False and manifest["train"]["val_size"] == 30
    assert manifest["train"]["fused_sgd"] is False
    # Scored here, the imported fit's MLflow run says how it ended, beside the card it ran on.
    assert evaluate_main(["--params", str(params), "--codes-from", str(out)]) == 0
    import mlflow

    (run,) = mlflow.search_runs(
        search_all_experiments=True,
        filter_string="tags.method = 'shdh' and tags.trained_on != ''",
        output_format="list",
    )
    assert run.data.tags["ended_by"] == "the rule"


def test_an_output_folder_that_is_a_file_is_named_before_anything_is_read(tmp_path, caplog):
    taken = tmp_path / "gist.npy"
    taken.write_bytes(b"a file of another step")
    argv = ["bundle", "train", str(tmp_path / "no-such-bundle.npz"), "--out", str(taken)]
    assert cli_main(argv) == 1
    assert f"--out {taken}: a file; the codes and records go in a folder" in caplog.text
    assert taken.read_bytes() == b"a file of another step"


def test_a_bundle_fit_takes_another_backbone_and_records_it(tmp_path, fashion_raw, caplog):
    """What a GPU session does with the gpu profile's bundle: the same data, split and rule, with
    the backbone and input size overridden on the command line, recorded with the fit."""
    _, bundle = _bundle_run(tmp_path, fashion_raw, methods=["shdh"], bits=[16], epochs=1)
    out = tmp_path / "gpu"
    argv = ["bundle", "train", str(bundle), "--out", str(out), "--no-progress"]
    sets = ["backbone=resnet18", "image_size=40", "n_train=48", "batch_size=16", "freeze_bn=true"]
    assert cli_main(argv + [a for s in sets for a in ("--set", f"train.{s}")]) == 0
    with caplog.at_level("ERROR"):  # a typo names the --set it came from, not params.yaml
        assert cli_main([*argv, "--set", "train.epocs=2"]) == 1
    assert (
        "--set train.epocs=2: no setting 'train.epocs' in the bundle's settings; "
        "did you mean train.epochs?"
    ) in caplog.text
    assert "params.yaml" not in caplog.text
    record = json.loads((out / "fits" / "shdh-16.json").read_text())
    loop = record["params"]["loop"]
    assert (loop["backbone"], loop["image_size"], loop["freeze_bn"]) == ("resnet18", 40, True)
    assert record["n_train_items"] == 48 and len(record["history"]) == 1
    assert (record["backbone"], record["pretrained_sha256"]) == ("resnet18", None)
    assert json.loads((out / "bundle.json").read_text())["train"]["backbone"] == "resnet18"
    # A value the method does not take is refused before any work, named with its --set.
    other = tmp_path / "typo"
    argv = ["bundle", "train", str(bundle), "--out", str(other), "--set", "train.shdh.e1=bogus"]
    assert cli_main(argv) == 1
    assert "the bundle's train settings with --set train.shdh.e1=bogus: train: " in caplog.text
    assert "SHDHSettings.e1 must be one of levels, matrix, got 'bogus'" in caplog.text
    assert not other.exists()
