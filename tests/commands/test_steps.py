"""The pipeline steps through their command line, on tiny Fashion-MNIST-format files."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from shdh.cli import build_parser, main
from shdh.settings.profiles import deep_merge, load_params
from tests.conftest import REPO, as_dvc_stage


def smoke_params(tmp_path: Path, raw_dir: Path, **overrides) -> Path:
    """params.yaml of the repository with the smoke profile and every path inside tmp_path."""
    params = deep_merge(
        load_params(REPO / "params.yaml"), load_params(REPO / "profiles" / "smoke.yaml")
    )
    params = deep_merge(
        params,
        {
            "data": {
                "raw_dir": str(raw_dir),
                "prepared_dir": str(tmp_path / "prepared"),
                "max_items": None,
            },
            "tree": {"out_dir": str(tmp_path / "tree")},
            "smatrix": {"out": str(tmp_path / "smatrix.npz")},
            "features": {"out": str(tmp_path / "gist.npy")},
            "index": {"out_dir": str(tmp_path / "index")},
            "train": {"models_dir": str(tmp_path / "models"), "epochs": 2},
            "baselines": {"models_dir": str(tmp_path / "baselines")},
            "evaluate": {
                "results_dir": str(tmp_path / "results"),
                "report": str(tmp_path / "results.md"),
            },
            "profile": "smoke",
        },
    )
    params = deep_merge(params, overrides)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def run_steps(params: Path, *steps: list[str]) -> None:
    """Each step as a stage of one pipeline run, as `dvc repro` runs it."""
    for step in steps:
        with as_dvc_stage(step[0]):
            assert main([*step, "--params", str(params)]) == 0, step


def test_every_subcommand_has_help(capsys):
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "step")
    for name in subparsers.choices:
        with pytest.raises(SystemExit) as exit_info:
            main([name, "--help"])
        assert exit_info.value.code == 0
        assert f"usage: shdh {name}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (
            ["serve", "--index", "x", "--port", "99999"],
            "--port: expected an integer from 1 to 65535",
        ),
        (["metrics", "codes.npz", "--n", "0"], "--n: expected an integer >= 1, got 0"),
        (["train", "--bits", "sixteen"], "--bits: expected an integer, got 'sixteen'"),
    ],
)
def test_numbers_out_of_range_are_refused_naming_the_option(capsys, argv, problem):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and problem in capsys.readouterr().err


ALL_METHODS = ("shdh", "dpsh", "itq", "kmh", "ksh", "ksh+h", "lfh", "cosdish", "cosdish+h")


@pytest.mark.slow  # end to end: raw data to metrics
def test_chain_fits_and_scores_every_method(tmp_path, fashion_raw, capsys, monkeypatch, caplog):
    """Every method and the classifier-oracle row (a train.methods entry, as in the paper
    profile's run) through the command-line steps; then a refit of one and a rerun of evaluate,
    which ranks that one's codes alone."""
    monkeypatch.setenv("SHDH_CACHE_DIR", str(tmp_path / "cache"))  # cold: nothing scored yet
    params = smoke_params(tmp_path, fashion_raw, train={"methods": ["shdh", "dpsh", "oracle"]})
    run_steps(params, ["prepare"], ["tree"], ["smatrix"], ["features"])
    for method in ("shdh", "dpsh", "oracle"):
        run_steps(params, ["train", "--method", method, "--bits", "16", "--no-progress"])
    run_steps(params, ["baselines", "--method", *ALL_METHODS[2:], "--bits", "16"])
    run_steps(params, ["evaluate"])
    # 300 pooled items -> 30 queries, 270 database items, K = 4 levels (root included)
    ancestors = np.load(tmp_path / "tree" / "ancestors.npy")
    assert ancestors.shape == (300, 4) and (ancestors[:, 0] == 0).all()
    assert np.load(tmp_path / "gist.npy").shape == (300, 512)
    metrics = json.loads((tmp_path / "results" / "metrics.json").read_text())
    assert set(metrics) == {*ALL_METHODS, "oracle", "random"}
    floor = metrics["random"]["16"]
    for method in ALL_METHODS:
        row = metrics[method]["16"]
        for key in ("acg@100", "dcg@100", "ndcg@100", "ndcg_list@100", "wr@100"):
            assert 0 <= row[key] and np.isfinite(row[key]), (method, key)
    # The class squares are trivially separable: two epochs must beat random codes clearly.
    assert metrics["shdh"]["16"]["ndcg@100"] > floor["ndcg@100"] + 0.05
    history = json.loads((tmp_path / "models" / "shdh" / "shdh-16" / "history.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2]
    # SHDH ranks with weighted segments, the baselines with one plain Hamming segment.
    from shdh.core.codes_file import load_codes

    shdh_codes = load_codes(tmp_path / "results" / "codes" / "shdh-16.npz")
    assert list(shdh_codes.segment_sizes) == [5, 5, 6]
    np.testing.assert_allclose(shdh_codes.segment_weights, [1 / 2, 1 / 3, 1 / 6])
    assert list(load_codes(tmp_path / "results" / "codes" / "itq-16.npz").segment_sizes) == [16]
    oracle_codes = load_codes(tmp_path / "results" / "codes" / "oracle-16.npz")
    assert list(oracle_codes.segment_sizes) == [5, 5, 6]  # SHDH's layout, one pattern per level
    assert metrics["oracle"]["16"]["ndcg@100"] > floor["ndcg@100"] + 0.05
    # `shdh metrics` on a codes file reproduces what evaluate wrote.
    capsys.readouterr()
    assert main(["metrics", str(tmp_path / "results" / "codes" / "shdh-16.npz")]) == 0
    printed = json.loads(capsys.readouterr().out)
    for key, value in metrics["shdh"]["16"].items():
        assert printed[key] == pytest.approx(value, abs=1e-6)
    timings = json.loads((tmp_path / "results" / "timings.json").read_text())
    assert timings["ksh"]["16"]["fit_seconds"] > 0
    assert (tmp_path / "results" / "plots" / "wr_at_n-16.png").stat().st_size > 1000
    table = (tmp_path / "results" / "table.md").read_text()
    assert "| shdh | 16 |" in table and "| oracle | 16 |" in table
    _rerun_scores_only_the_refitted_method(tmp_path, fashion_raw, metrics, monkeypatch, caplog)


def _rerun_scores_only_the_refitted_method(tmp_path, fashion_raw, metrics, monkeypatch, caplog):
    """ITQ refitted with one iteration instead of the smoke profile's: a rerun of evaluate ranks
    its codes alone and reads the other ten code sets' scores from the score cache, and the nine
    other models' codes from the codes cache."""
    from shdh.steps import score as score_step

    ranked = []

    def counted(codes, **settings):
        ranked.append(codes.query_codes.shape)
        return real(codes, **settings)

    real = score_step.evaluate_codes
    monkeypatch.setattr(score_step, "evaluate_codes", counted)
    codes = tmp_path / "results" / "codes"
    itq_before = (codes / "itq-16.npz").read_bytes()
    params = smoke_params(
        tmp_path,
        fashion_raw,
        train={"methods": ["shdh", "dpsh", "oracle"]},
        baselines={"itq": {"n_iter": 1}},
    )
    run_steps(params, ["baselines", "--method", "itq", "--bits", "16"])
    with caplog.at_level(logging.INFO, logger="shdh.steps.score"):
        run_steps(params, ["evaluate"])
    assert ranked == [(30, 2)]  # one code set: 30 queries of 16 bits
    assert (codes / "itq-16.npz").read_bytes() != itq_before
    rescored = json.loads((tmp_path / "results" / "metrics.json").read_text())
    assert {m: r for m, r in rescored.items() if m != "itq"} == {
        m: r for m, r in metrics.items() if m != "itq"
    }
    assert "10 of 11 code sets unchanged since an earlier run" in caplog.text
    # and the models that did not change did not encode again: their codes were read back
    read = set(re.findall(r"(\S+): its codes were read from", caplog.text))
    assert read == {f"{m}-16" for m in metrics if m not in ("itq", "random")}


@pytest.mark.slow  # end to end: raw data to metrics
def test_runs_are_tracked_under_one_pipeline_parent(tmp_path, fashion_raw):
    import mlflow

    params = smoke_params(
        tmp_path, fashion_raw, train={"methods": ["shdh"]}, baselines={"methods": ["itq"]}
    )
    run_steps(params, ["prepare"], ["tree"], ["smatrix"], ["features"])
    run_steps(params, ["train", "--bits", "16", "--no-progress"])
    run_steps(params, ["baselines", "--method", "itq", "--bits", "16"], ["evaluate"])
    client = mlflow.MlflowClient()
    ref = json.loads((tmp_path / "models" / "shdh" / "shdh-16" / "mlflow_run.json").read_text())
    run = client.get_run(ref["run_id"])
    assert run.info.run_name == "shdh-16"  # the fit's name: its folder's and codes file's too
    assert run.data.params["epochs"] == "2" and run.data.params["bits"] == "16"
    # the loss settings by params.yaml's names, not as one `objective`
    assert (run.data.params["alpha"], run.data.params["reduction"]) == ("1.0", "sum")
    assert not [k for k in run.data.params if k.startswith("objective")]
    assert run.data.tags["method"] == "shdh" and run.data.tags["profile"] == "smoke"
    assert "ended_by" not in run.data.tags  # a step-schedule fit has no stop to report
    assert {"ndcg_at_100", "fit_seconds", "encode_seconds"} <= set(run.data.metrics)
    losses = client.get_metric_history(ref["run_id"], "loss")
    assert [m.step for m in losses] == [1, 2]
    artifacts = {a.path for a in client.list_artifacts(ref["run_id"])}
    assert {"checkpoint", "codes.npz", "wr.png"} <= artifacts  # the same names in every run
    # Both methods' runs and the random floor hang under one parent run of this pipeline run.
    parent_id = run.data.tags["mlflow.parentRunId"]
    itq = json.loads((tmp_path / "baselines" / "itq" / "itq-16" / "mlflow_run.json").read_text())
    assert client.get_run(itq["run_id"]).data.tags["mlflow.parentRunId"] == parent_id
    children = client.search_runs(
        [run.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'"
    )
    assert {c.data.tags["method"] for c in children} == {"shdh", "itq", "random"}
    # Every method run's scores again at step = bits, which the saved view draws against the
    # code length; the scores themselves stay at step 0.
    for child in [run, *children]:
        for score in ("ndcg_at_100", "map_at_1000", "mahp_at_2500", "acg_at_100"):
            (twin,) = client.get_metric_history(child.info.run_id, f"{score}_by_bits")
            assert (twin.step, twin.value) == (16, child.data.metrics[score]), score
        assert [m.step for m in client.get_metric_history(child.info.run_id, "ndcg_at_100")] == [0]
    assert "shdh.pipeline_run_id" in client.get_run(parent_id).data.tags
    assert client.get_run(parent_id).info.status == "FINISHED"  # evaluate closed it

    # The same fit run again by hand, outside the pipeline: a parent of its own, closed when
    # the command ends; the pipeline's parent stays finished and its children unchanged.
    assert (
        main(
            ["train", "--bits", "16", "--no-progress", "--resume", "never"]
            + ["--params", str(params)]
        )
        == 0
    )
    again = json.loads((tmp_path / "models" / "shdh" / "shdh-16" / "mlflow_run.json").read_text())
    hand_parent = client.get_run(again["parent_run_id"])
    assert again["run_id"] != ref["run_id"] and hand_parent.info.run_id != parent_id
    assert hand_parent.info.status == "FINISHED"
    assert hand_parent.info.run_name.startswith("by-hand-")
    assert hand_parent.data.tags["shdh.by_hand"] == "true"
    assert (
        client.get_run(again["run_id"]).data.tags["mlflow.parentRunId"] == hand_parent.info.run_id
    )
    assert client.get_run(parent_id).info.status == "FINISHED"
    after = client.search_runs(
        [run.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'"
    )
    assert sorted(c.info.run_id for c in after) == sorted(c.info.run_id for c in children)


def test_a_fit_the_epoch_cap_cut_short_is_tagged_so_in_its_run(tmp_path, fashion_raw):
    import mlflow

    plateau = {"val_size": 30, "schedule": "plateau", "patience": 5, "min_delta": 0.0}
    params = smoke_params(tmp_path, fashion_raw, train={"methods": ["shdh"], **plateau})
    run_steps(params, ["prepare"], ["tree"], ["smatrix"])
    run_steps(params, ["train", "--bits", "16", "--no-progress"])
    ref = json.loads((tmp_path / "models" / "shdh" / "shdh-16" / "mlflow_run.json").read_text())
    # 2 epochs, each a new best against a patience of 5: the cap ended it, still gaining
    tags = mlflow.MlflowClient().get_run(ref["run_id"]).data.tags
    assert tags["ended_by"] == "the epoch cap, still gaining"


def test_resume_continues_a_run_to_more_epochs(tmp_path, fashion_raw, caplog):
    """...and a train step with weights it cannot use fails before it changes the fit's
    folder: the checkpoint still resumes, under the same MLflow run."""
    params = smoke_params(tmp_path, fashion_raw, train={"epochs": 1})
    run_steps(
        params, ["prepare"], ["tree"], ["smatrix"], ["train", "--bits", "16", "--no-progress"]
    )
    fit = tmp_path / "models" / "shdh" / "shdh-16"
    kept = ("mlflow_run.json", "work/checkpoint.pt", "work/hasher.json", "fit.json")
    before = {name: (fit / name).read_bytes() for name in kept}
    bad = smoke_params(tmp_path, fashion_raw, train={"epochs": 2, "pretrained": "no/such.pth"})
    argv = ["train", "--bits", "16", "--no-progress", "--resume", "auto", "--params", str(bad)]
    with as_dvc_stage("train"):
        assert main(argv) == 1
    assert {name: (fit / name).read_bytes() for name in kept} == before
    # A fit that fails once its run is open (here, by hand: a run under a parent of its own)
    # keeps the reference to the run of the model still in the folder.
    checkpoint = fit / "work" / "checkpoint.pt"
    checkpoint.write_bytes(b"")
    params = smoke_params(tmp_path, fashion_raw, train={"epochs": 1})  # the same file as `bad`
    always = ["train", "--bits", "16", "--no-progress", "--resume", "always"]
    assert main([*always, "--params", str(params)]) == 1
    assert f"{checkpoint}: cannot be read" in caplog.text
    assert (fit / "mlflow_run.json").read_bytes() == before["mlflow_run.json"]
    checkpoint.write_bytes(before["work/checkpoint.pt"])
    params = smoke_params(tmp_path, fashion_raw, train={"epochs": 2})
    run_steps(params, ["train", "--bits", "16", "--no-progress", "--resume", "auto"])
    history = json.loads((tmp_path / "models" / "shdh" / "shdh-16" / "history.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2]


def test_label_path_not_in_tree_fails_and_writes_nothing(tmp_path, fashion_raw, caplog):
    from shdh.core.hierarchy import LabelTree
    from shdh.data.fashion_mnist import label_paths

    # A tree that lacks the Bag leaf: the items labelled Bag cannot be placed.
    LabelTree.from_paths([p for p in label_paths() if not p.endswith("Bag")]).save(
        tmp_path / "no-bag.json"
    )
    params = smoke_params(tmp_path, fashion_raw, tree={"source": str(tmp_path / "no-bag.json")})
    run_steps(params, ["prepare"])
    assert main(["tree", "--params", str(params)]) == 1
    assert "Goods/Accessories/Bag" in caplog.text and "not in the tree" in caplog.text
    assert not (tmp_path / "tree").exists()


def test_code_length_below_the_number_of_levels_is_refused(tmp_path, fashion_raw, caplog):
    params = smoke_params(tmp_path, fashion_raw)
    run_steps(params, ["prepare"], ["tree"], ["smatrix"])
    # K = 4: the levels layout needs K-1 = 3 bits at least, the paper layout K = 4.
    assert main(["train", "--bits", "2", "--params", str(params)]) == 1
    assert "n_bits=2 is too small for K=4 with layout 'levels': it needs at least 3" in caplog.text
    paper = smoke_params(tmp_path, fashion_raw, train={"shdh": {"layout": "paper"}})
    assert main(["train", "--bits", "3", "--params", str(paper)]) == 1
    assert "n_bits=3 is too small for K=4 with layout 'paper': it needs at least 4" in caplog.text
    assert not (tmp_path / "models" / "shdh").exists()


def test_corrupt_raw_file_is_named_and_keeps_previous_output(tmp_path, fashion_raw, caplog):
    params = smoke_params(tmp_path, fashion_raw)
    run_steps(params, ["prepare"])
    before = sorted(p.name for p in (tmp_path / "prepared").rglob("*"))
    images = fashion_raw / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:5000])  # truncated payload
    assert main(["prepare", "--params", str(params)]) == 1
    assert "train-images-idx3-ubyte" in caplog.text
    assert sorted(p.name for p in (tmp_path / "prepared").rglob("*")) == before


def test_an_output_setting_pointing_at_the_raw_data_is_refused_and_deletes_nothing(
    tmp_path, fashion_raw, caplog
):
    before = {p.name: p.read_bytes() for p in fashion_raw.iterdir()}
    params = smoke_params(tmp_path, fashion_raw, data={"prepared_dir": str(fashion_raw)})
    assert main(["prepare", "--params", str(params)]) == 1
    assert f"data.prepared_dir: {fashion_raw} holds other files" in caplog.text
    assert {p.name: p.read_bytes() for p in fashion_raw.iterdir()} == before


def test_a_method_whose_settings_rule_out_every_length_names_them(tmp_path, fashion_raw):
    kmh = {"bits_per_subspace": 3, "lam": 10.0, "n_iter": 5}
    params = smoke_params(tmp_path, fashion_raw, baselines={"bits": [16], "kmh": kmh})
    with pytest.raises(SystemExit) as refused:
        main(["baselines", "--method", "kmh", "--params", str(params)])
    assert str(refused.value) == (
        f"shdh baselines: {params}: baselines.bits [16] holds no code length that kmh can make "
        f"with baselines.kmh: {kmh}"
    )


def test_corrupt_codes_file_is_named(tmp_path, caplog):
    bad = tmp_path / "codes.npz"
    np.savez(bad, query_codes=np.zeros((2, 1), np.uint8))
    assert main(["metrics", str(bad)]) == 1
    assert "codes.npz" in caplog.text and "db_codes" in caplog.text


def test_profile_apply_keeps_comments_and_refuses_unknown_keys(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text((REPO / "params.yaml").read_text())
    assert (
        main(
            [
                "profile",
                "apply",
                "smoke",
                "--params",
                str(params),
                "--profiles-dir",
                str(REPO / "profiles"),
            ]
        )
        == 0
    )
    text = params.read_text()
    assert "# master seed" in text
    assert load_params(params)["train"]["epochs"] == 1
    assert load_params(params)["profile"] == "smoke"
    (tmp_path / "bad.yaml").write_text("train:\n  epochz: 3\n")
    assert (
        main(["profile", "apply", "bad", "--params", str(params), "--profiles-dir", str(tmp_path)])
        == 1
    )


def test_default_profile_matches_params_yaml():
    """The committed params.yaml is the default profile; the two must not drift apart."""
    params = load_params(REPO / "params.yaml")
    default = load_params(REPO / "profiles" / "default.yaml")
    assert deep_merge(params, default) == params


@pytest.mark.parametrize("profile", ["smoke", "default", "paper", "gpu", "methods"])
def test_every_profile_applies_and_plans_its_runs(profile):
    from shdh.kubeflow import resolve_params
    from shdh.plan.all_methods import planned_runs

    params = resolve_params(REPO / "params.yaml", profile, profiles_dir=REPO / "profiles")
    runs = planned_runs(params)
    assert runs and len(set(runs)) == len(runs)
    if profile == "paper":  # the full protocol: every item trains, every fit has 3 seeds
        assert params["train"]["n_train"] is None and params["baselines"]["n_train"] is None
        assert {seed for _, _, seed in runs} == {0, 1, 2}
        assert len(runs) == 3 * (3 * 3 + 7 * 3)  # SHDH, DPSH, the oracle; 7 shallow; 3 lengths
        assert params["evaluate"]["results_dir"] != "results"  # beside the default's results
    if profile == "methods":  # the default's budget, every deep method of the catalogue
        from shdh.hashers.method_catalogue import names

        default = resolve_params(REPO / "params.yaml", "default", profiles_dir=REPO / "profiles")
        deep = {m for m, _, _ in runs if m in names("deep")}
        assert deep == set(names("deep")) and len(deep) == 13
        assert {run for run in runs if run[0] not in deep} == {
            run for run in planned_runs(default) if run[0] not in deep
        }
    if profile == "gpu":  # the paper's protocol at the paper's network, on a GPU
        paper = resolve_params(REPO / "params.yaml", "paper", profiles_dir=REPO / "profiles")
        assert runs == planned_runs(paper)
        assert params["train"]["width"] == 1.0 and params["train"]["device"] == "cuda"
        assert params["baselines"] == paper["baselines"]  # the shallow methods as in paper
        assert params["evaluate"]["results_dir"] == "results/gpu"
    else:
        assert params["train"]["device"] == "auto"  # no profile but gpu insists on a GPU


def test_train_fits_every_code_length_of_every_baseline_in_one_process(tmp_path, fashion_raw):
    params = smoke_params(
        tmp_path, fashion_raw, baselines={"bits": [10, 16], "methods": ["itq", "kmh"]}
    )
    run_steps(params, ["prepare"], ["tree"], ["smatrix"], ["features"])
    run_steps(params, ["baselines"])  # what the DVC stage `baselines` runs
    models = tmp_path / "baselines"
    assert sorted(p.name for p in models.iterdir()) == ["itq", "kmh"]
    assert not (tmp_path / "models").exists()  # the deep methods' folder is another output
    assert sorted(p.name for p in (models / "itq").iterdir()) == ["itq-10", "itq-16"]
    # KMH's 4-bit subspaces do not divide 10 bits: it runs at 16 only, as evaluate expects
    assert sorted(p.name for p in (models / "kmh").iterdir()) == ["kmh-16"]
    runs = {
        json.loads((d / "mlflow_run.json").read_text())["run_id"]
        for d in (models / "itq").iterdir()
    }
    assert len(runs) == 2  # one MLflow run per method and code length


@pytest.mark.slow  # end to end: raw data to metrics
def test_seeds_fit_each_method_once_per_seed_and_report_mean_and_spread(tmp_path, fashion_raw):
    params = smoke_params(
        tmp_path,
        fashion_raw,
        train={"methods": ["shdh"], "seeds": [3, 4]},
        baselines={"methods": ["itq"], "seeds": [3, 4]},
    )
    run_steps(params, ["prepare"], ["tree"], ["smatrix"], ["features"])
    run_steps(params, ["train", "--method", "shdh", "--no-progress"], ["baselines"])
    run_steps(params, ["evaluate"])
    names = sorted(p.name for p in (tmp_path / "models" / "shdh").iterdir())
    assert names == ["shdh-16-seed3", "shdh-16-seed4"]
    assert (
        json.loads((tmp_path / "models" / "shdh" / names[1] / "fit.json").read_text())["seed"] == 4
    )
    results = tmp_path / "results"
    by_seed = json.loads((results / "metrics_by_seed.json").read_text())
    metrics = json.loads((results / "metrics.json").read_text())
    for method in ("shdh", "itq", "random"):
        fits = by_seed[method]["16"]
        assert sorted(fits) == ["3", "4"], method
        values = [fits[s]["ndcg@100"] for s in ("3", "4")]
        row = metrics[method]["16"]
        assert row["seeds"] == 2
        assert row["ndcg@100"] == pytest.approx(np.mean(values), abs=1e-6)
        assert row["ndcg@100_sd"] == pytest.approx(np.std(values, ddof=1), abs=1e-6)
    # Different seeds give different networks, hence different codes.
    from shdh.core.codes_file import load_codes

    a, b = (load_codes(results / "codes" / f"shdh-16-seed{s}.npz") for s in (3, 4))
    assert not np.array_equal(a.db_codes, b.db_codes)
    table = (results / "table.md").read_text()
    assert f"| shdh | 16 | {metrics['shdh']['16']['acg@100']:.4f} ± " in table
    assert "over 2 seeds" in (tmp_path / "results.md").read_text()


def test_bad_seeds_are_refused_by_name(tmp_path, fashion_raw, caplog):
    params = smoke_params(tmp_path, fashion_raw, train={"seeds": [1, 1]})
    for step in (["prepare"], ["train", "--method", "shdh"]):  # every step checks every key
        assert main([*step, "--params", str(params)]) != 0
        assert "train.seeds: expected null or a non-empty list" in caplog.text
        assert "got [1, 1]" in caplog.text
    assert not (tmp_path / "models").exists() and not (tmp_path / "prepared").exists()


def _net_weights(model_dir: Path) -> dict[str, np.ndarray]:
    with np.load(model_dir / "hasher" / "state.npz") as state:
        return {k: state[k] for k in state.files if k.startswith("net.")}


def _same_network(a: Path, b: Path) -> bool:
    wa, wb = _net_weights(a), _net_weights(b)
    return wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)


def _started_from(model_dir: Path) -> str | None:
    return json.loads((model_dir / "fit.json").read_text()).get("checkpoint_from")


def test_oracle_trains_once_per_seed_for_every_code_length(tmp_path, fashion_raw):
    """The oracle's network outputs class scores at any code length, so its 24-bit fit starts
    from the 16-bit fit's finished training, per seed, and matches a fit trained on its own."""
    train = {"methods": ["oracle"], "bits": [16, 24], "seeds": [3, 4]}
    params = smoke_params(tmp_path, fashion_raw, train=train)
    run_steps(params, ["prepare"], ["tree"], ["smatrix"])
    run_steps(params, ["train", "--method", "oracle", "--no-progress", "--resume", "auto"])
    models = tmp_path / "models" / "oracle"
    for seed in (3, 4):
        first, second = (models / f"oracle-{bits}-seed{seed}" for bits in (16, 24))
        assert _started_from(first) is None and _started_from(second) == first.name
        assert (first / "history.json").read_text() == (second / "history.json").read_text()
        assert _same_network(first, second)
    assert not _same_network(models / "oracle-16-seed3", models / "oracle-16-seed4")
    # A 24-bit fit trained from scratch is the same network: sharing only skips the repeat.
    (tmp_path / "alone").mkdir()
    alone = smoke_params(tmp_path / "alone", fashion_raw, train={**train, "bits": [24]})
    run_steps(alone, ["prepare"], ["tree"], ["smatrix"])
    run_steps(alone, ["train", "--method", "oracle", "--no-progress", "--resume", "never"])
    alone_fit = tmp_path / "alone" / "models" / "oracle" / "oracle-24-seed3"
    assert _started_from(alone_fit) is None
    assert _same_network(alone_fit, models / "oracle-24-seed3")
    # Another learning rate is another training: 16 bits retrains, then 24 bits shares that.
    changed = {**train, "oracle": {"lr": 0.002}, "seeds": [3]}  # train.oracle.lr is its own
    changed = smoke_params(tmp_path, fashion_raw, train=changed)
    run_steps(changed, ["train", "--method", "oracle", "--no-progress", "--resume", "auto"])
    assert _started_from(models / "oracle-16-seed3") is None
    assert _started_from(models / "oracle-24-seed3") == "oracle-16-seed3"
    assert not _same_network(models / "oracle-24-seed3", alone_fit)
