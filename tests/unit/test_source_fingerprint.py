"""A checkpoint knows the code that made it: resumed only by the same code, retrained (auto) or
refused (always) by other code, naming the module that changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shdh.runtime import source_fingerprint
from shdh.runtime.source_fingerprint import code_text, differing, fingerprint
from tests.conftest import REPO


def test_comments_docstrings_and_blank_lines_do_not_count() -> None:
    code = "def f(x):\n    return x + 1  # one more\n"
    reworded = textwrap.dedent(
        '''
        """A module docstring."""


        def f(x):  # a comment
            """f's docstring,
            over two lines."""
            return x + 1\x20\x20
        '''
    )
    assert code_text(reworded) == code_text(code) == "def f(x):\n    return x + 1"
    assert code_text("def f(x):\n    return x + 2\n") != code_text(code)
    # a docstring after non-ASCII text on its line is cut by characters, not bytes
    assert code_text('class Ü:\n    """é"""\n    ü = "é"  # ß\n') == 'class Ü:\n    ü = "é"'


def test_a_deep_hasher_covers_the_code_that_decides_its_numbers() -> None:
    """A method's module and what it runs: the shared deep hasher, the loop, the network, the
    pairs it is trained on; not another method's code, nor the tracking and the features."""
    code = fingerprint(["shdh.hashers.shdh"])
    for module in (
        "shdh.hashers.shdh",
        "shdh.hashers.deep",
        "shdh.training.loop",
        "shdh.core.batch_pairs",
        "shdh.training.loop_settings",
        "shdh.nets.hashing",
    ):
        assert module in code, module
    for module in (
        "shdh.tracking.mlflow_runs",
        "shdh.features.gist",
        "shdh.hashers.itq",
        "shdh.hashers.dpsh",
    ):
        assert module not in code, module
    assert all(len(digest) == 16 for digest in code.values())
    oracle = fingerprint(["shdh.hashers.oracle"])
    assert "shdh.hashers.deep" in oracle and "shdh.hashers.shdh" not in oracle


def _fresh_process_fingerprint(monkeypatch, cache: Path | None) -> dict[str, str]:
    """fingerprint as a new process computes it: nothing kept in memory, the given cache."""
    if cache is None:
        monkeypatch.setenv("SHDH_FINGERPRINT_CACHE", "0")
    else:
        monkeypatch.delenv("SHDH_FINGERPRINT_CACHE", raising=False)
        monkeypatch.setenv("SHDH_CACHE_DIR", str(cache))
    source_fingerprint._analysed.cache_clear()
    return fingerprint(["shdh.hashers.dpsh"])


def test_the_analysis_is_kept_on_disk_by_content_and_a_damaged_entry_is_redone(
    monkeypatch, tmp_path
) -> None:
    uncached = _fresh_process_fingerprint(monkeypatch, None)
    assert not list(tmp_path.rglob("*"))
    first = _fresh_process_fingerprint(monkeypatch, tmp_path)
    entries = sorted((tmp_path / "fingerprints").glob("*.json"))
    assert first == uncached and len(entries) == len(first)
    damaged, wrong = entries[0], entries[1]
    damaged.write_text("{not json")
    wrong.write_text(json.dumps({"digest": 7, "imports": []}))
    # read back (two entries redone and rewritten): the same digests, as without the cache
    assert _fresh_process_fingerprint(monkeypatch, tmp_path) == uncached
    assert json.loads(damaged.read_text())["digest"] in uncached.values()
    assert json.loads(wrong.read_text())["digest"] in uncached.values()
    # an entry is found by the module's text: a stored digest is used as it is found
    for entry in entries:
        stored = json.loads(entry.read_text())
        entry.write_text(json.dumps({**stored, "digest": "0" * 16}))
    assert set(_fresh_process_fingerprint(monkeypatch, tmp_path).values()) == {"0" * 16}
    # an unwritable cache costs time, not the fingerprint
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert _fresh_process_fingerprint(monkeypatch, blocked) == uncached


def test_an_edited_module_is_analysed_afresh(monkeypatch, tmp_path) -> None:
    source_fingerprint._analysed.cache_clear()
    monkeypatch.setenv("SHDH_CACHE_DIR", str(tmp_path))
    path = source_fingerprint._source("shdh.hashers.dpsh")
    text = path.read_text(encoding="utf-8")
    digest, imported = source_fingerprint._analysed("shdh.hashers.dpsh", path, text)
    edited = text + "\nfrom shdh.hashers import shdh\nEXTRA = 1\n"
    digest2, imported2 = source_fingerprint._analysed("shdh.hashers.dpsh", path, edited)
    assert digest2 != digest and imported2 == imported | {"shdh.hashers.shdh"}
    assert len(list((tmp_path / "fingerprints").glob("*.json"))) == 2


def test_differing_names_the_changed_modules() -> None:
    now = {"shdh.hashers.shdh": "a", "shdh.training.loop": "b"}
    assert differing(dict(now), now) == []
    assert differing({"shdh.hashers.shdh": "x", "shdh.training.loop": "b"}, now) == [
        "shdh.hashers.shdh"
    ]
    assert differing({"shdh.hashers.shdh": "a"}, now) == ["shdh.training.loop"]
    # a record from before fingerprints: every module differs
    assert differing(None, now) == ["shdh.hashers.shdh", "shdh.training.loop"]


# A tiny DPSH fit, in this process or in a child that imports the package from PYTHONPATH (an
# edited copy of the source). Each resume mode of argv[3:] is tried in turn on the same work_dir;
# a refusal is printed, not raised.
FIT = """
import json, logging, sys
import numpy as np
from shdh.hashers.dpsh import DPSH
from shdh.hashers.supervision import PairSimilarity
from shdh.training.loop_settings import LoopSettings

def fit(work_dir, epochs, resume):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, size=(24, 28, 28), dtype=np.uint8)
    anc = np.stack([np.zeros(24, int), 1 + np.arange(24) % 2, 3 + np.arange(24) % 4], axis=1)
    loop = LoopSettings(width=1 / 16, batch_size=8, epochs=epochs, device="cpu")
    hasher = DPSH(n_bits=8, loop=loop, seed=0, work_dir=work_dir)
    hasher.fit(images, PairSimilarity(anc, [0.0, 2 / 3, 1 / 3], "label"), resume=resume)
    return [round(h["loss"], 10) for h in hasher.history_]

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    for resume in sys.argv[3:]:
        try:
            print("HISTORY", json.dumps(fit(sys.argv[1], int(sys.argv[2]), resume)))
        except ValueError as err:
            print("REFUSED", err)
"""


@pytest.mark.slow
def test_auto_retrains_after_a_loss_change_and_always_refuses(tmp_path: Path, caplog) -> None:
    namespace: dict = {}
    exec(FIT, namespace)  # noqa: S102 - the same script, run here on the installed package
    work = tmp_path / "work"
    first = namespace["fit"](str(work), 1, "auto")
    # The same code, one epoch more: the checkpoint is continued, its epoch kept as it was.
    with caplog.at_level("INFO", logger="shdh.training.checkpoint"):
        resumed = namespace["fit"](str(work), 2, "auto")
    assert resumed[0] == first[0] and len(resumed) == 2
    assert "resuming" in caplog.text
    # A constant of the loss edited in a copy of the package: always refuses, naming the
    # module; auto trains afresh and says why.
    src = tmp_path / "src"
    shutil.copytree(
        REPO / "src" / "shdh", src / "shdh", ignore=shutil.ignore_patterns("__pycache__")
    )
    losses = src / "shdh" / "hashers" / "dpsh.py"
    text = losses.read_text()
    assert '"eta": float(settings.eta)' in text
    losses.write_text(
        text.replace('"eta": float(settings.eta)', '"eta": 0.5 * float(settings.eta)')
    )
    child = subprocess.run(
        [sys.executable, "-c", FIT, str(work), "2", "always", "auto"],
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    refused, retrained = (x for x in child.stdout.splitlines() if x.startswith(("REFUSED", "HIST")))
    assert refused.startswith("REFUSED") and "shdh.hashers.dpsh changed since" in refused
    assert "not resuming" in child.stdout and "shdh.hashers.dpsh" in child.stdout
    history = json.loads(retrained.removeprefix("HISTORY "))
    assert len(history) == 2 and history[0] != first[0]
    code, here = (
        json.loads((work / "hasher.json").read_text())["code"],
        fingerprint(["shdh.hashers.dpsh"]),
    )
    assert code.keys() == here.keys()
    assert [m for m in code if code[m] != here[m]] == ["shdh.hashers.dpsh"]
