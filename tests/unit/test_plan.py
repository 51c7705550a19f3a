"""The run plan: a deep method's constructor arguments (shdh.plan.all_methods.method_params: its
settings objects made from params.yaml's flat keys, and the flat names its MLflow run logs them
under), and the fits it makes, their names and folders, for every front door."""

from pathlib import Path

import pytest

from shdh.hashers.method_settings import DPSHSettings, OracleSettings, SHDHSettings
from shdh.plan.all_methods import fit_plan, method_params, section_fits
from shdh.plan.fits import fit_name
from shdh.runtime.errors import ConfigError
from shdh.steps.fit_deep import logged_params
from shdh.training.loop_settings import LoopSettings

# A `train` section as params.yaml writes it: shared settings, then one sub-mapping per method.
SECTION = {
    "methods": ["shdh", "dpsh"],
    "bits": [16],
    "models_dir": "models",
    "seeds": None,
    "n_train": None,
    "epochs": 2,
    "lr": 0.005,
    "reduction": "sum",
    "shdh": {"layout": "paper", "alpha": 0.5, "e2": "trace", "memory_bank": False},
    "dpsh": {"eta": 2.0, "reduction": "mean", "memory_bank": True},
    "oracle": {"reduction": "mean", "lr": 0.01},
}


def test_deep_methods_get_their_settings_from_the_same_keys() -> None:
    """train.shdh's layout, alpha, e1, e2, target and train.dpsh's eta go into the method's
    settings, train.reduction into every method's, unless the method's own mapping overrides it."""
    assert method_params(SECTION, "shdh") == {
        "loop": LoopSettings(epochs=2, lr=0.005),
        "settings": SHDHSettings(
            layout="paper", alpha=0.5, e2="trace", reduction="sum", memory_bank=False
        ),
    }
    assert method_params(SECTION, "dpsh") == {
        "loop": LoopSettings(epochs=2, lr=0.005),
        "settings": DPSHSettings(eta=2.0, reduction="mean", memory_bank=True),
    }
    assert method_params(SECTION, "oracle") == {
        "loop": LoopSettings(epochs=2, lr=0.01),
        "settings": OracleSettings(reduction="mean"),
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"shdh": {"alfa": 1.0}}, r"params\.yaml: shdh: unknown settings \['alfa'\]"),
        ({"shdh": {"eta": 1.0}}, r"params\.yaml: shdh: unknown settings \['eta'\]"),
        ({"shdh": {"settings": {"alpha": 1.0}}}, r"shdh: unknown settings \['settings'\]"),
        ({"eta": 1.0}, r"params\.yaml: train: settings \['eta'\] are not shdh's"),
        ({"shdh": {"e1": "bogus"}}, r"params\.yaml: train: SHDHSettings\.e1 must be one of"),
        ({"reduction": "max"}, r"params\.yaml: train: SHDHSettings\.reduction must be one of"),
    ],
)
def test_unknown_or_bad_keys_are_refused_by_name(change: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        method_params({**SECTION, **change}, "shdh")


def test_the_mlflow_run_logs_each_setting_under_its_params_yaml_name() -> None:
    """The loop's and the objective's settings stand beside the method's, by their own names
    (alpha, eta, reduction, epochs), one column per setting for every method."""
    shdh = logged_params({**method_params(SECTION, "shdh"), "work_dir": "w"})
    assert {k: shdh[k] for k in ("alpha", "e1", "e2", "target", "reduction")} == {
        "alpha": 0.5,
        "e1": "levels",
        "e2": "trace",
        "target": "signed",
        "reduction": "sum",
    }
    assert (shdh["epochs"], shdh["layout"], shdh["memory_bank"]) == (2, "paper", False)
    dpsh = logged_params(method_params(SECTION, "dpsh"))
    assert (dpsh["eta"], dpsh["reduction"], dpsh["lr"]) == (2.0, "mean", 0.005)
    for logged in (shdh, dpsh):
        assert not [k for k in logged if k.startswith(("settings", "loop", "work_dir"))]


def test_a_fit_has_one_name_for_its_folder_its_codes_and_its_run() -> None:
    """METHOD-BITS without a `seeds` list (the master seed, unnamed), METHOD-BITS-seedS with
    one; the model folder is models_root/METHOD/NAME, its work folder inside it."""
    alone = fit_plan(SECTION, "shdh", 16, None, seed=7, models_root="models")
    assert (alone.name, alone.seed, alone.own_seed) == ("shdh-16", 7, None)
    assert alone.out_dir == Path("models", "shdh", "shdh-16")
    assert alone.work_dir == alone.out_dir / "work" and alone.record.name == "fit.json"
    seeded = fit_plan(SECTION, "shdh", 16, 3, seed=7, models_root="models")
    assert (seeded.name, seeded.seed, seeded.out_dir.name) == ("shdh-16-seed3", 3, "shdh-16-seed3")
    assert fit_name("random", 16, 3) == seeded.name.replace("shdh", "random")


def test_the_fits_of_a_section_come_in_the_plans_order() -> None:
    """Every method at the first length, then the next; each seed of the section's list."""
    section = {**SECTION, "seeds": [1, 2]}
    fits = section_fits(section, ["shdh", "dpsh"], [16, 32], seed=0, models_root="m")
    assert [f.name for f in fits] == [
        f"{m}-{b}-seed{s}" for b in (16, 32) for m in ("shdh", "dpsh") for s in (1, 2)
    ]
    assert fits[0].params == method_params(section, "shdh")


def test_a_bundle_plans_its_fits_as_the_pipeline_does(tmp_path) -> None:
    """The same Fits as shdh train's, their work folders under the bundle's work folder; a
    shallow method is refused by name (it fits GIST features, which a bundle does not carry)."""
    from shdh.bundle import plan_fits

    settings = {"train": SECTION, "seed": 5}
    fits = plan_fits(settings, ["dpsh"], [16], None, work_dir=tmp_path)
    assert fits == section_fits(SECTION, ["dpsh"], [16], seed=5, models_root=tmp_path)
    assert fits[0].work_dir == tmp_path / "dpsh" / "dpsh-16" / "work"
    with pytest.raises(ConfigError, match=r"\['itq'\] are shallow methods"):
        plan_fits(settings, ["itq"], None, None, work_dir=tmp_path)
