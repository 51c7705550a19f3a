"""GIST-512: checked against a literal float64 transcription of LMgist (FFT prefilt, full-grid
Gabor filtering), and on images whose answer is known (stripes, constants, toy classes)."""

from __future__ import annotations

import numpy as np
import pytest

from shdh.features.gist import block_edges, gabor_bank, gist_features, prefilter

ORIENTATIONS = (8, 8, 8, 8)


def lmgist_reference(gray: np.ndarray) -> np.ndarray:
    """LMgist on one (S, S) float64 image already in [0, 255], step by step as the MATLAB code
    (prefilt, createGabor on a centred grid then fftshift, gistGabor, downN)."""
    s = gray.shape[0]
    # prefilt, fc = 4
    w, s1 = 5, 4 / np.sqrt(np.log(2))
    img = np.pad(np.log(gray + 1), w, mode="symmetric")
    sn = img.shape[0]
    n = sn + sn % 2
    img = np.pad(img, ((0, n - sn), (0, n - sn)), mode="symmetric")
    fx, fy = np.meshgrid(np.arange(-n // 2, n // 2), np.arange(-n // 2, n // 2))
    gf = np.fft.fftshift(np.exp(-(fx**2 + fy**2) / s1**2))
    out = img - np.real(np.fft.ifft2(np.fft.fft2(img) * gf))
    localstd = np.sqrt(np.abs(np.fft.ifft2(np.fft.fft2(out**2) * gf)))
    out = (out / (0.2 + localstd))[w : sn - w, w : sn - w]
    # createGabor([8 8 8 8], s + 64)
    be = 32
    n = s + 2 * be
    fx, fy = np.meshgrid(np.arange(-n // 2, n // 2), np.arange(-n // 2, n // 2))
    fr = np.fft.fftshift(np.sqrt(fx**2 + fy**2))
    t = np.fft.fftshift(np.angle(fx + 1j * fy))
    filters = []
    for i, o in enumerate(ORIENTATIONS):
        for j in range(o):
            p = [0.35, 0.3 / 1.85**i, 16 * o**2 / 32**2, np.pi / o * j]
            tr = t + p[3]
            tr = tr + 2 * np.pi * (tr < -np.pi) - 2 * np.pi * (tr > np.pi)
            filters.append(np.exp(-10 * p[0] * (fr / n / p[1] - 1) ** 2 - 2 * p[2] * np.pi * tr**2))
    # gistGabor + downN, 4 blocks
    spectrum = np.fft.fft2(np.pad(out, be, mode="symmetric"))
    edges = np.fix(np.linspace(0, s, 5)).astype(int)
    feats = []
    for g in filters:
        ig = np.abs(np.fft.ifft2(spectrum * g))[be : n - be, be : n - be]
        v = np.array(
            [
                [ig[edges[a] : edges[a + 1], edges[b] : edges[b + 1]].mean() for b in range(4)]
                for a in range(4)
            ]
        )
        feats.append(v.flatten(order="F"))  # MATLAB's reshape(v, [W N])
    return np.concatenate(feats)


def stretch(img: np.ndarray) -> np.ndarray:
    x = img.astype(np.float64)
    return 255 * (x - x.min()) / (x.max() - x.min())


def test_shapes_and_dtype_for_gray_rgb_and_other_sizes():
    rng = np.random.default_rng(0)
    assert gist_features(rng.integers(0, 256, (3, 28, 28), dtype=np.uint8)).shape == (3, 512)
    rgb = gist_features(rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8))
    assert rgb.shape == (2, 512) and rgb.dtype == np.float32
    assert gist_features(rng.integers(0, 256, (2, 40, 40, 1), dtype=np.uint8)).shape == (2, 512)
    small = gist_features(rng.integers(0, 256, (2, 32, 32), dtype=np.uint8), orientations=(4, 6))
    assert small.shape == (2, 10 * 16)
    assert gist_features(rng.integers(0, 256, (1, 32, 32), dtype=np.uint8), n_blocks=2).shape == (
        1,
        128,
    )


def test_matches_a_literal_lmgist_transcription():
    rng = np.random.default_rng(1)
    noise = rng.integers(0, 256, (2, 32, 32), dtype=np.uint8)
    yy, xx = np.mgrid[:32, :32]
    pattern = (127 + 120 * np.sin(0.7 * xx + 0.3 * yy) * (xx > 10)).astype(np.uint8)
    images = np.concatenate([noise, pattern[None]])
    ours = gist_features(images)
    for img, feat in zip(images, ours, strict=True):
        ref = lmgist_reference(stretch(img))
        # The support truncation and float32 leave errors far below the features' scale.
        np.testing.assert_allclose(feat, ref, rtol=0, atol=1e-5 * ref.max())


def test_separable_prefilter_equals_the_fft_form():
    rng = np.random.default_rng(2)
    gray = rng.uniform(0, 255, (3, 32, 32))
    ours = prefilter(gray.astype(np.float32))
    w, s1, n = 5, 4 / np.sqrt(np.log(2)), 42
    f = np.fft.fftfreq(n, 1 / n)
    gf = np.exp(-(f[:, None] ** 2 + f[None, :] ** 2) / s1**2)
    for img, got in zip(gray, ours, strict=True):
        x = np.pad(np.log(img + 1), w, mode="symmetric")
        out = x - np.fft.ifft2(np.fft.fft2(x) * gf).real
        out = out / (0.2 + np.sqrt(np.abs(np.fft.ifft2(np.fft.fft2(out**2) * gf))))
        np.testing.assert_allclose(got, out[w:-w, w:-w], atol=2e-5)


def test_28x28_is_zero_padded_like_the_network_input():
    rng = np.random.default_rng(3)
    img = rng.integers(1, 256, (2, 28, 28), dtype=np.uint8)
    padded = np.pad(img, ((0, 0), (2, 2), (2, 2)))
    np.testing.assert_array_equal(gist_features(img), gist_features(padded))


def test_deterministic_and_independent_of_batch_size():
    rng = np.random.default_rng(4)
    images = rng.integers(0, 256, (7, 28, 28), dtype=np.uint8)
    a = gist_features(images)
    np.testing.assert_array_equal(a, gist_features(images))
    np.testing.assert_allclose(gist_features(images, batch_size=3), a, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(gist_features(images, progress=False), a)


def test_invariant_to_an_affine_change_of_intensity():
    rng = np.random.default_rng(5)
    img = rng.integers(0, 100, (2, 32, 32), dtype=np.uint8)
    np.testing.assert_allclose(
        gist_features(img * 2 + 40), gist_features(img), rtol=1e-4, atol=1e-6
    )


def test_filter_bank_count_and_peaks():
    n = 96
    bank = gabor_bank(ORIENTATIONS, n)
    assert bank.shape == (32, n, n)
    assert gabor_bank((4, 6, 2), 64).shape == (12, 64, 64)
    f = np.fft.fftfreq(n, 1 / n)
    radii = [0.3 * n / 1.85**i for i in range(4)]
    for k, g in enumerate(bank):
        scale, j = divmod(k, 8)
        u, v = np.unravel_index(np.argmax(g), g.shape)
        fy, fx = f[u], f[v]
        radius, angle = np.hypot(fx, fy), np.arctan2(fy, fx)
        assert g.max() > 0.9
        # The peak sits at the filter's own scale and orientation (centre -pi j / 8) ...
        assert np.argmin(np.abs(np.array(radii) - radius)) == scale
        centres = -np.pi * np.arange(8) / 8
        gap = np.abs(np.angle(np.exp(1j * (angle - centres))))
        assert np.argmin(gap) == j
        # ... and within a grid step of it.
        assert abs(radius - radii[scale]) <= 1.0
        assert gap[j] <= 1.0 / radius + 1e-9


def test_rotating_stripes_moves_energy_between_orientation_channels():
    xx = np.arange(32)[None, :].repeat(32, axis=0)
    stripes = (127 + 120 * np.cos(2 * np.pi * xx / 5)).astype(np.uint8)  # varies along x
    feats = gist_features(np.stack([stripes, np.rot90(stripes)]))
    energy = feats.reshape(2, 4, 8, 16).sum(axis=(1, 3))  # (image, orientation)
    assert np.argmax(energy[0]) == 0  # frequency along fx: orientation 0
    assert np.argmax(energy[1]) == 4  # rotated by 90 degrees: orientation 4 (-pi/2)
    assert energy[0, 0] > 5 * energy[0, 4] and energy[1, 4] > 5 * energy[1, 0]


def test_block_order_is_matlab_column_major():
    img = np.full((32, 32), 128, dtype=np.uint8)
    yy, xx = np.mgrid[:8, 24:32]
    img[:8, 24:] = (128 + 120 * np.cos(2 * np.pi * (xx + yy) / 4)).astype(np.uint8)
    blocks = gist_features(img[None]).reshape(32, 16).sum(axis=0)
    assert np.argmax(blocks) == 0 + 4 * 3  # block row 0, block column 3


@pytest.mark.parametrize("value", [0, 37, 255])
def test_constant_images_give_finite_features(value):
    # 32x32: nothing to stretch, so every feature is 0 (LMgist would divide by zero).
    np.testing.assert_array_equal(gist_features(np.full((2, 32, 32), value, dtype=np.uint8)), 0)
    # 28x28: the zero border of the padding makes an edge, still finite.
    assert np.all(np.isfinite(gist_features(np.full((2, 28, 28), value, dtype=np.uint8))))


def _toy_fashion(kind: int, rng: np.random.Generator) -> np.ndarray:
    """28x28 silhouettes of three garment-like shapes, jittered in place, size and brightness."""
    img = np.zeros((28, 28))
    dy, dx = rng.integers(-2, 3, size=2)
    top, left = 4 + dy, 6 + dx
    h = rng.integers(17, 21)
    if kind == 0:  # T-shirt: a wide bar across the top and a body below it
        img[top : top + 5, left - 3 : left + 19] = 1
        img[top : top + h, left + 3 : left + 13] = 1
    elif kind == 1:  # trousers: two legs
        img[top : top + h, left + 1 : left + 6] = 1
        img[top : top + h, left + 10 : left + 15] = 1
        img[top : top + 4, left + 1 : left + 15] = 1
    else:  # bag: a box with a handle
        img[top + 6 : top + h, left - 1 : left + 17] = 1
        img[top : top + 6, left + 4 : left + 6] = 1
        img[top : top + 6, left + 10 : left + 12] = 1
        img[top : top + 2, left + 4 : left + 12] = 1
    img = img * rng.uniform(120, 250) + rng.normal(0, 8, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def test_same_toy_class_is_closer_than_other_classes():
    rng = np.random.default_rng(6)
    labels = np.repeat(np.arange(3), 8)
    feats = gist_features(np.stack([_toy_fashion(k, rng) for k in labels])).astype(np.float64)
    dist = np.linalg.norm(feats[:, None] - feats[None], axis=-1)
    same = labels[:, None] == labels[None]
    off_diag = ~np.eye(len(labels), dtype=bool)
    assert dist[same & off_diag].mean() < 0.7 * dist[~same].mean()
    np.fill_diagonal(dist, np.inf)
    assert np.all(labels[np.argmin(dist, axis=1)] == labels)  # 1-NN is always right


def test_block_edges_follow_downN():
    np.testing.assert_array_equal(block_edges(32, 4), [0, 8, 16, 24, 32])
    np.testing.assert_array_equal(block_edges(30, 4), [0, 7, 15, 22, 30])


@pytest.mark.parametrize(
    ("images", "match"),
    [
        (np.zeros((2, 28, 28), dtype=np.float32), "uint8, got dtype float32"),
        (np.zeros((28, 28), dtype=np.uint8), r"\(N, H, W\) or \(N, H, W, C\)"),
        (np.zeros((1, 2, 28, 28, 1), dtype=np.uint8), r"\(N, H, W\) or \(N, H, W, C\)"),
        (np.zeros((0, 28, 28), dtype=np.uint8), "must not be empty"),
        (np.zeros((2, 0, 28), dtype=np.uint8), "must not be empty"),
        (np.zeros((2, 28, 28, 2), dtype=np.uint8), "1 or 3 channels, got 2"),
        ([[[0]]], "numpy array, got list"),
    ],
)
def test_bad_images_are_refused(images, match):
    with pytest.raises(ValueError, match=match):
        gist_features(images)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"image_size": 31}, "image_size must be even"),
        ({"image_size": 0}, "image_size must be a positive integer"),
        ({"n_blocks": 0}, "n_blocks must be a positive integer"),
        ({"image_size": 4, "n_blocks": 6}, "n_blocks=6 exceeds image_size=4"),
        ({"orientations": ()}, "orientations must be a non-empty list"),
        ({"orientations": (8, 0)}, "orientations must be a positive integer"),
        ({"fc_prefilt": 0}, "fc_prefilt must be a positive number"),
        ({"fc_prefilt": float("nan")}, "fc_prefilt must be a positive number"),
        ({"fc_prefilt": "4"}, "fc_prefilt must be a positive number"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
    ],
)
def test_bad_parameters_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        gist_features(np.zeros((1, 28, 28), dtype=np.uint8), **params)
