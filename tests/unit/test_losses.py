import math

import numpy as np
import pytest
import torch

from shdh.hashers.shdh import shdh_loss

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _layout(n_bits: int, k: int, layout: str) -> tuple[list[int], list[int], list[float]]:
    """Local stand-in for shdh.core.hierarchy: segment sizes, their levels, u_k (Eq. 2)."""
    levels = list(range(2, k + 1)) if layout == "levels" else list(range(1, k + 1))
    size = n_bits // len(levels)
    sizes = [size] * (len(levels) - 1) + [n_bits - size * (len(levels) - 1)]
    u = [0.0] + [2 * (k + 1 - j) / (k * (k - 1)) for j in range(2, k + 1)]
    return sizes, levels, u


def _brute(
    z, anc, sizes, levels, u, alpha, e1, e2, reduction, bank_z=None, bank_anc=None, target="signed"
):
    """The loss written pair by pair, straight from the definitions in docs/method.md."""
    h = np.tanh(z)
    hp, ap = h, anc
    if bank_z is not None:
        hp, ap = np.concatenate([h, np.tanh(bank_z)]), np.concatenate([anc, bank_anc])
    starts = np.cumsum([0] + sizes)
    total, n_pairs = 0.0, 0
    for i in range(len(h)):
        for j in range(len(hp)):
            if j == i:  # batch self-pair (bank rows start at len(h))
                continue
            n_pairs += 1
            pred = s_ij = term = 0.0
            for s, k in enumerate(levels):
                a, b = starts[s], starts[s + 1]
                rho = float(h[i, a:b] @ hp[j, a:b]) / (b - a)
                same = k >= 2 and anc[i, k - 1] != -1 and anc[i, k - 1] == ap[j, k - 1]
                t = 1.0 if same else (-1.0 if target == "signed" else 0.0)
                term += u[k - 1] * (rho - t) ** 2
                pred += u[k - 1] * rho
                s_ij += u[k - 1] * t
            total += term if e1 == "levels" else (pred - s_ij) ** 2
    e1_val = total / len(h) if reduction == "sum" else total / n_pairs
    e2_val = 0.0
    for s, k in enumerate(levels):
        hk = h[:, starts[s] : starts[s + 1]]
        if e2 == "balance":
            e2_val += u[k - 1] * float((hk.mean(0) ** 2).sum()) / hk.shape[1]
        elif e2 == "trace":
            e2_val -= u[k - 1] * float((hk**2).sum(1).mean()) / hk.shape[1]
    return e1_val + alpha * e2_val, e1_val, alpha * e2_val


def _data(b: int = 5, n_bits: int = 10, seed: int = 0, m: int = 0):
    rng = np.random.default_rng(seed)
    z = rng.normal(scale=1.5, size=(b + m, n_bits))
    leaf = rng.integers(0, 4, size=b + m)
    anc = np.stack([np.zeros(b + m, int), leaf // 2, leaf], axis=1)
    anc[0, 2] = -1  # no node at the leaf level: never similar there
    anc[1 % (b + m), 2] = -1
    return z[:b], anc[:b], z[b:], anc[b:]


@pytest.mark.parametrize("layout", ["levels", "paper"])
@pytest.mark.parametrize("e1", ["levels", "matrix"])
@pytest.mark.parametrize("e2", ["balance", "trace", "none"])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("bank", [0, 3])
@pytest.mark.parametrize("target", ["signed", "binary"])
def test_matches_brute_force(
    layout: str, e1: str, e2: str, reduction: str, bank: int, target: str
) -> None:
    sizes, levels, u = _layout(10, 3, layout)
    z, anc, bz, banc = _data(m=bank)
    extra = {"bank_z": torch.from_numpy(bz), "bank_anc": torch.from_numpy(banc)} if bank else {}
    loss, parts = shdh_loss(
        torch.from_numpy(z),
        torch.from_numpy(anc),
        segment_sizes=sizes,
        segment_levels=levels,
        layer_weights=u,
        alpha=0.7,
        e1=e1,
        e2=e2,
        reduction=reduction,
        target=target,
        **extra,
    )
    want, want_e1, want_e2 = _brute(
        z,
        anc,
        sizes,
        levels,
        u,
        0.7,
        e1,
        e2,
        reduction,
        bz if bank else None,
        banc if bank else None,
        target,
    )
    assert loss.dtype == torch.float64
    assert math.isclose(float(loss), want, rel_tol=1e-10, abs_tol=1e-12)
    assert math.isclose(float(parts["e1"]), want_e1, rel_tol=1e-10, abs_tol=1e-12)
    assert math.isclose(float(parts["e2"]), want_e2, rel_tol=1e-10, abs_tol=1e-12)
    assert not parts["e1"].requires_grad and not parts["e2"].requires_grad


def test_perfect_codes_hand_case() -> None:
    # K = 3, u = (0, 2/3, 1/3), one bit per level. Items 0, 1 share a leaf; 2 is a sibling leaf;
    # 3 is in the other subtree. Codes: level 2 = superclass sign, level 3 = leaf sign.
    sizes, levels, u = [1, 1], [2, 3], [0.0, 2 / 3, 1 / 3]
    anc = torch.tensor([[0, 1, 3], [0, 1, 3], [0, 1, 4], [0, 2, 5]])
    z = 30.0 * torch.tensor([[1, 1], [1, 1], [1, -1], [-1, -1]], dtype=torch.float64)
    kw = {"segment_sizes": sizes, "segment_levels": levels, "layer_weights": u, "e2": "none"}
    # levels mode: only the pair (1 leaf vs 3 leaf) errs at level 3: rho = +1, target -1.
    # Pairs (2,3) and (3,2): level 3 rho = +1 (both -1), target -1: u_3 * 4 each.
    loss, _ = shdh_loss(z, anc, **kw, reduction="sum")
    assert math.isclose(float(loss), (2 * 4 / 3) / 4, rel_tol=1e-12)
    # matrix mode: sum_k u_k rho vs s_ij; pair (2,3): pred -2/3 + 1/3 = -1/3, target -1.
    loss, _ = shdh_loss(z, anc, **kw, e1="matrix", reduction="sum")
    assert math.isclose(float(loss), (2 * (2 / 3) ** 2) / 4, rel_tol=1e-12)


def test_sum_is_partners_times_mean() -> None:
    sizes, levels, u = _layout(8, 4, "levels")
    rng = np.random.default_rng(3)
    z = torch.from_numpy(rng.normal(size=(6, 8)))
    anc = torch.from_numpy(np.stack([np.zeros(6, int), *rng.integers(0, 3, (3, 6))], axis=1))
    kw = {"segment_sizes": sizes, "segment_levels": levels, "layer_weights": u, "e2": "none"}
    total, _ = shdh_loss(z, anc, **kw, reduction="sum")
    mean, _ = shdh_loss(z, anc, **kw, reduction="mean")
    assert math.isclose(float(total), 5 * float(mean), rel_tol=1e-12)  # B - 1 partners


@pytest.mark.parametrize("e2", ["balance", "trace"])
@pytest.mark.parametrize("e1", ["levels", "matrix"])
def test_root_segment_gets_no_gradient(e1: str, e2: str) -> None:
    sizes, levels, u = _layout(12, 3, "paper")
    z0, anc, _, _ = _data(b=6, n_bits=12)
    z = torch.from_numpy(z0).requires_grad_(True)
    loss, _ = shdh_loss(
        z,
        torch.from_numpy(anc),
        segment_sizes=sizes,
        segment_levels=levels,
        layer_weights=u,
        e1=e1,
        e2=e2,
    )
    loss.backward()
    assert sizes == [4, 4, 4]
    assert torch.all(z.grad[:, :4] == 0)
    assert torch.all(z.grad[:, 4:].abs().sum(0) > 0)


def test_bank_gets_no_gradient() -> None:
    sizes, levels, u = _layout(10, 3, "levels")
    z, anc, bz, banc = _data(m=4)
    bank_z = torch.from_numpy(bz).requires_grad_(True)
    loss, _ = shdh_loss(
        torch.from_numpy(z),
        torch.from_numpy(anc),
        segment_sizes=sizes,
        segment_levels=levels,
        layer_weights=u,
        bank_z=bank_z,
        bank_anc=torch.from_numpy(banc),
    )
    assert not loss.requires_grad  # only z carries gradient, and z here does not need one


def test_bf16_input_is_computed_in_float32() -> None:
    sizes, levels, u = _layout(10, 3, "levels")
    z, anc, _, _ = _data()
    loss, _ = shdh_loss(
        torch.from_numpy(z).bfloat16(),
        torch.from_numpy(anc),
        segment_sizes=sizes,
        segment_levels=levels,
        layer_weights=u,
    )
    assert loss.dtype == torch.float32


def _call(**over):
    sizes, levels, u = _layout(10, 3, "levels")
    z, anc, _, _ = _data()
    kw = {"segment_sizes": sizes, "segment_levels": levels, "layer_weights": u} | over
    z = kw.pop("z", torch.from_numpy(z))
    anc = kw.pop("anc", torch.from_numpy(anc))
    return shdh_loss(z, anc, **kw)


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"e1": "pairs"}, r"e1 must be one of \('levels', 'matrix'\)"),
        ({"e2": "entropy"}, r"e2 must be one of \('balance', 'trace', 'none'\)"),
        ({"reduction": "max"}, r"reduction must be one of \('sum', 'mean'\)"),
        ({"z": torch.zeros(5, 9)}, "z must be"),
        ({"z": torch.zeros(10)}, "z must be"),
        ({"anc": torch.zeros(5, 2, dtype=torch.long)}, "anc has K = 2 levels, not the tree.s 3"),
        ({"anc": torch.zeros(4, 3, dtype=torch.long)}, "anc has 4 rows but z has 5"),
        ({"segment_levels": [2]}, "segment_levels"),
        ({"segment_levels": [2, 4]}, "segment_levels"),
        ({"segment_levels": [3, 3]}, "distinct"),
        ({"alpha": -1.0}, "alpha"),
        ({"bank_z": torch.zeros(2, 10)}, "together"),
        ({"bank_z": torch.zeros(2, 9), "bank_anc": torch.zeros(2, 3)}, "bank_z must be"),
        ({"bank_z": torch.zeros(2, 10), "bank_anc": torch.zeros(3, 3)}, "bank_anc must be"),
        (
            {
                "z": torch.zeros(1, 10),
                "anc": torch.zeros(1, 3, dtype=torch.long),
                "reduction": "mean",
            },
            "needs >= 2",
        ),
    ],
)
def test_bad_input(over: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _call(**over)


def test_single_item_sum_has_no_pairs() -> None:
    loss, parts = _call(z=torch.zeros(1, 10), anc=torch.zeros(1, 3, dtype=torch.long), e2="none")
    assert float(loss) == 0.0 and float(parts["e1"]) == 0.0


@pytest.mark.parametrize("e2", ["balance", "trace", "none"])
@pytest.mark.parametrize("target", ["signed", "binary"])
def test_the_stacked_gpu_terms_equal_the_per_segment_ones(e2: str, target: str) -> None:
    """The GPU path computes every segment at once; its E1 pairs, E2 and gradients are the
    per-segment reference's (which CPU fits keep, bit for bit) up to float rounding, unlabelled
    (-1) nodes and the root level included."""
    from shdh.hashers.shdh import _level_terms, _stacked_level_terms

    gen = torch.Generator().manual_seed(0)
    B = 64
    anc = torch.stack(
        [
            torch.zeros(B, dtype=torch.long),
            torch.randint(1, 3, (B,), generator=gen),
            torch.randint(3, 8, (B,), generator=gen),
        ],
        1,
    )
    anc[:5, 2] = -1
    sizes, levels, u = [10, 11, 11], [1, 2, 3], [0.2, 0.5, 0.3]
    z = torch.randn(B, 32, generator=gen, requires_grad=True)
    h = torch.tanh(z)
    e1_ref, e2_ref = _level_terms(h, h, anc, anc, sizes, levels, u, "levels", e2, target)
    (grad_ref,) = torch.autograd.grad(e1_ref.sum() + e2_ref, z, retain_graph=True)
    e1_new, e2_new = _stacked_level_terms(h, anc, sizes, levels, u, e2, target)
    (grad_new,) = torch.autograd.grad(e1_new.sum() + e2_new, z)
    assert torch.allclose(e1_new, e1_ref, atol=1e-6)
    assert torch.allclose(e2_new, e2_ref, atol=1e-6)
    assert torch.allclose(grad_new, grad_ref, atol=1e-5)
    assert grad_ref.abs().max() > 0.1  # the comparison is not between zeros
