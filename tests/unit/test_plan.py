"""The run plan's constructor arguments (shdh.plan.method_params): a deep method's settings
objects made from params.yaml's flat keys, and the flat names its MLflow run logs them under."""

import pytest

from shdh.errors import ConfigError
from shdh.loop import LoopSettings
from shdh.losses import DPSHObjective, OracleObjective, SHDHObjective
from shdh.plan import method_params
from shdh.steps.fit_deep import _logged_params

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


def test_deep_methods_get_their_objective_from_the_same_keys() -> None:
    """train.shdh's alpha, e1, e2, target and train.dpsh's eta go into the method's objective,
    train.reduction into every method's, unless the method's own mapping overrides it."""
    assert method_params(SECTION, "shdh") == {
        "loop": LoopSettings(epochs=2, lr=0.005),
        "objective": SHDHObjective(alpha=0.5, e2="trace", reduction="sum"),
        "layout": "paper",
        "memory_bank": False,
    }
    assert method_params(SECTION, "dpsh") == {
        "loop": LoopSettings(epochs=2, lr=0.005),
        "objective": DPSHObjective(eta=2.0, reduction="mean"),
        "memory_bank": True,
    }
    assert method_params(SECTION, "oracle") == {
        "loop": LoopSettings(epochs=2, lr=0.01),
        "objective": OracleObjective(reduction="mean"),
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"shdh": {"alfa": 1.0}}, r"params\.yaml: shdh: unknown settings \['alfa'\]"),
        ({"shdh": {"eta": 1.0}}, r"params\.yaml: shdh: unknown settings \['eta'\]"),
        ({"shdh": {"objective": {"alpha": 1.0}}}, r"shdh: unknown settings \['objective'\]"),
        ({"eta": 1.0}, r"params\.yaml: train: settings \['eta'\] are not shdh's"),
        ({"shdh": {"e1": "bogus"}}, r"params\.yaml: train: SHDHObjective: e1 must be one of"),
        ({"reduction": "max"}, r"params\.yaml: train: SHDHObjective: reduction must be one of"),
    ],
)
def test_unknown_or_bad_keys_are_refused_by_name(change: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        method_params({**SECTION, **change}, "shdh")


def test_the_mlflow_run_logs_each_setting_under_its_params_yaml_name() -> None:
    """The loop's and the objective's settings stand beside the method's, by their own names
    (alpha, eta, reduction, epochs), as before the loss settings became one objective."""
    shdh = _logged_params({**method_params(SECTION, "shdh"), "work_dir": "w"})
    assert {k: shdh[k] for k in ("alpha", "e1", "e2", "target", "reduction")} == {
        "alpha": 0.5,
        "e1": "levels",
        "e2": "trace",
        "target": "signed",
        "reduction": "sum",
    }
    assert (shdh["epochs"], shdh["layout"], shdh["memory_bank"]) == (2, "paper", False)
    dpsh = _logged_params(method_params(SECTION, "dpsh"))
    assert (dpsh["eta"], dpsh["reduction"], dpsh["lr"]) == (2.0, "mean", 0.005)
    for logged in (shdh, dpsh):
        assert not [k for k in logged if k.startswith(("objective", "loop", "work_dir"))]
