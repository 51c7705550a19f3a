"""The random floor's seeds when the deep and the shallow methods are seeded differently."""

from shdh.plan.fits import make_fit
from shdh.steps.score import floor_seeds


def _fits(method, bits, own_seeds, master=0):
    return [
        make_fit(method, bits, own, seed=master, models_root="models", params={})
        for own in own_seeds
    ]


def test_one_floor_per_seed_named_when_any_fit_of_that_seed_is():
    """train.seeds [0, 1] beside baselines.seeds null, master seed 0: fits seeded 0 with and
    without an own seed (once a TypeError in sorting them), one floor each for 0 and 1."""
    fits = _fits("shdh", 16, [0, 1]) + _fits("itq", 16, [None])
    assert floor_seeds(fits) == [(0, 0), (1, 1)]
    assert floor_seeds(_fits("itq", 16, [None]) + _fits("shdh", 16, [0, 1])) == [(0, 0), (1, 1)]


def test_unnamed_seeds_stay_unnamed_and_distinct_seeds_each_get_one():
    assert floor_seeds(_fits("shdh", 16, [None]) + _fits("itq", 32, [None])) == [(0, None)]
    fits = _fits("shdh", 16, [None], master=5) + _fits("itq", 16, [2, 7])
    assert floor_seeds(fits) == [(2, 2), (5, None), (7, 7)]
