"""512-D GIST (Oliva & Torralba 2001) as LabelMe's LMgist computes it.

The paper's shallow baselines (ITQ, KMH, KSH, LFH, COSDISH) hash 512-D GIST vectors, so their
numbers depend on the descriptor as much as on the method. This module follows LMgist step by
step, so that the features mean what the paper's do:

1. grayscale (LMgist takes the mean of the colour channels), brought to `image_size` (28x28 is
   zero-padded to 32x32 exactly as the network's input is; other sizes are resized), and the
   intensities stretched to [0, 255];
2. `prefilter` (LMgist's prefilt): log, whitening and local contrast normalisation with a
   Gaussian of `fc_prefilt` cycles, on a copy padded symmetrically by 5 pixels;
3. `gabor_bank` (LMgist's createGabor): 4 scales x 8 orientations of transfer functions, applied
   to the image padded symmetrically by 32 pixels (a 96 x 96 spectrum for 32 x 32 images);
4. the magnitude of each response averaged over a 4 x 4 grid of blocks (LMgist's downN):
   32 filters x 16 blocks = 512 values, filter-major, blocks in MATLAB's column-major order.

Speed. Step 3 done directly is one 96 x 96 inverse FFT per filter and image: 2.2 million of them
for Fashion-MNIST, several minutes on two cores. But each transfer function is a wedge: its
rows and columns of the spectrum below SUPPORT_TOL of its peak can be dropped, and only the
central image_size x image_size pixels of a response are kept. So each response is evaluated as
the inverse DFT restricted to those rows, columns and pixels: two small complex matrix products
per filter, batched over images (BLAS runs them far faster than FFTs of the whole padded grid).
Every dropped row and column has gains below SUPPORT_TOL = 1e-5 of the peak; the features then
differ from the full-FFT computation by about 1e-6 of their largest value, float32 noise (the
unit tests compare the two).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.fft
from tqdm import tqdm

BOUNDARY = 32  # LMgist's boundaryExtension: symmetric padding before the Gabor filters
PREFILT_PAD = 5  # prefilt's symmetric padding
SUPPORT_TOL = 1e-5  # filter gains below this (peak = 1) are treated as zero, see the docstring


# --- the LMgist steps ---------------------------------------------------------------------------


def gabor_bank(orientations: Sequence[int], n: int) -> np.ndarray:
    """LMgist's createGabor: (sum(orientations), n, n) float64 transfer functions.

    Laid out like an unshifted DFT (frequency 0 at [0, 0]), which is fftshift of createGabor's
    centred grid. Scale i (0-based) with o orientations, orientation j: peak radius 0.3 n / 1.85^i
    cycles and angular centre -pi j / o, i.e. G = exp(-3.5 (fr / (n f_i) - 1)^2 - 2 pi (16 o^2 /
    32^2) (theta + pi j / o)^2) with the angle wrapped to [-pi, pi].
    """
    f = np.fft.fftfreq(n, 1.0 / n)  # integer frequencies 0, 1, ..., -1
    fy, fx = np.meshgrid(f, f, indexing="ij")  # rows: vertical frequency, as in createGabor
    radius = np.hypot(fx, fy)
    theta = np.arctan2(fy, fx)  # MATLAB's angle(fx + i fy)
    filters = []
    for scale, n_or in enumerate(orientations):
        peak = 0.3 / 1.85**scale  # cycles per pixel
        sharpness = 16.0 * n_or**2 / 32**2
        for j in range(n_or):
            t = theta + np.pi / n_or * j
            t = t + 2 * np.pi * (t < -np.pi) - 2 * np.pi * (t > np.pi)
            filters.append(
                np.exp(-10 * 0.35 * (radius / n / peak - 1) ** 2 - 2 * sharpness * np.pi * t**2)
            )
    return np.stack(filters)


def prefilter(images: np.ndarray, fc: float = 4.0) -> np.ndarray:
    """LMgist's prefilt on (B, S, S) intensities in [0, 255]: whitening, then local contrast
    normalisation, so that the Gabor energies measure structure rather than lighting.

    out = x - lowpass(x); out / (0.2 + sqrt(|lowpass(out^2)|)) with x = log(1 + image), padded
    symmetrically by 5 pixels (then to an even side), and lowpass the Gaussian transfer function
    exp(-(fx^2 + fy^2) / s^2), s = fc / sqrt(ln 2), in cycles per padded image. That Gaussian is
    separable, so the circular filtering prefilt does with 2-D FFTs is done exactly as one
    circulant matrix product per image axis.
    """
    s = images.shape[1]
    w = PREFILT_PAD
    index = np.pad(np.arange(s), w, mode="symmetric")
    n = len(index) + len(index) % 2  # prefilt pads to an even side, after the image
    index = np.pad(index, (0, n - len(index)), mode="symmetric")
    x = np.log1p(images.astype(np.float32)).transpose(1, 0, 2)[index][:, :, index]  # (n, B, n)
    circ = _prefilt_circulant(n, float(fc))

    def lowpass(a: np.ndarray) -> np.ndarray:  # a: (n, B, n) -> the same, filtered
        a = (circ @ a.reshape(n, -1)).reshape(a.shape)  # along image rows
        return (a.reshape(-1, n) @ circ).reshape(a.shape)  # along image columns

    out = x - lowpass(x)
    local_std = np.sqrt(np.abs(lowpass(out * out)))
    out /= 0.2 + local_std
    return np.ascontiguousarray(out[w : w + s, :, w : w + s].transpose(1, 0, 2))


@lru_cache(maxsize=8)
def _prefilt_circulant(n: int, fc: float) -> np.ndarray:
    """(n, n) float32 C with C[i, j] = c[(i - j) mod n], c = ifft of exp(-f^2 / s^2): circular
    convolution along one axis. The transfer function is even, so c is real and C symmetric."""
    s1 = fc / np.sqrt(np.log(2.0))
    f = np.fft.fftfreq(n, 1.0 / n)
    c = np.fft.ifft(np.exp(-(f**2) / s1**2)).real
    i = np.arange(n)
    return c[(i[:, None] - i[None, :]) % n].astype(np.float32)


def block_edges(size: int, n_blocks: int) -> np.ndarray:
    """LMgist's downN grid: fix(linspace(0, size, n_blocks + 1))."""
    return np.trunc(np.linspace(0, size, n_blocks + 1)).astype(np.int64)


# --- the Gabor responses, evaluated on the filters' support -------------------------------------


@dataclass(frozen=True)
class _FilterPlan:
    rows: slice  # rows of the centred spectrum where the filter is not negligible (U of them)
    cols: slice  # its columns there (V of them), in float32 units of a complex64 row (2 each)
    gain: np.ndarray  # (U, 1, 2V) float32 transfer function on that box, each value twice
    left: np.ndarray  # (S, U) complex64 inverse DFT from those rows onto the kept pixel rows
    right: np.ndarray  # (V, S) complex64 inverse DFT from those columns onto the kept columns


@lru_cache(maxsize=4)
def _plan(orientations: tuple[int, ...], image_size: int) -> tuple[_FilterPlan, ...]:
    """Per filter, the box of the centred spectrum it needs and the two partial inverse DFTs.

    A filter's support is a connected wedge, so its rows (and columns) of support are one range
    of the centred spectrum; a slice of it costs no copy. The gain is stored twice per value so
    that it multiplies the spectrum viewed as float32 pairs (a plain real product, much faster
    than numpy's complex-by-real one).
    """
    n = image_size + 2 * BOUNDARY
    freq = np.arange(n) - n // 2  # centred integer frequencies (n is even)
    pixels = np.arange(BOUNDARY, BOUNDARY + image_size)  # the crop gistGabor keeps
    plans = []
    for g in np.fft.fftshift(gabor_bank(orientations, n), axes=(1, 2)):
        r = np.flatnonzero(g.max(axis=1) >= SUPPORT_TOL)
        c = np.flatnonzero(g.max(axis=0) >= SUPPORT_TOL)
        rows, cols = slice(r[0], r[-1] + 1), slice(c[0], c[-1] + 1)
        # ifft2 = (1/n) sum_u e^{2 pi i u y / n} [(1/n) sum_v (.) e^{2 pi i v x / n}]
        left = np.exp(2j * np.pi * np.outer(pixels, freq[rows]) / n) / n
        right = np.exp(2j * np.pi * np.outer(freq[cols], pixels) / n) / n
        plans.append(
            _FilterPlan(
                rows=rows,
                cols=slice(2 * cols.start, 2 * cols.stop),
                gain=np.repeat(g[rows, cols], 2, axis=1)[:, None, :].astype(np.float32),
                left=left.astype(np.complex64),
                right=right.astype(np.complex64),
            )
        )
    return tuple(plans)


def _block_average_matrix(size: int, n_blocks: int) -> np.ndarray:
    """(n_blocks, size) float32 A with A @ m @ A.T the block means of m on downN's grid."""
    bounds = block_edges(size, n_blocks)
    a = np.zeros((n_blocks, size), dtype=np.float32)
    for i in range(n_blocks):
        a[i, bounds[i] : bounds[i + 1]] = 1.0 / (bounds[i + 1] - bounds[i])
    return a


def _gabor_block_means(
    prefiltered: np.ndarray, orientations: tuple[int, ...], n_blocks: int
) -> np.ndarray:
    """LMgist's gistGabor on (B, S, S): (B, n_filters * n_blocks^2) float32.

    Images are stacked as (rows, B, columns), so that a product along either image axis is one
    matrix product for the whole batch.
    """
    b, s, _ = prefiltered.shape
    index = np.pad(np.arange(s), BOUNDARY, mode="symmetric")  # n = S + 2 * BOUNDARY entries
    padded = prefiltered.transpose(1, 0, 2)[index][:, :, index]  # (n, B, n)
    # (-1)^(y + x) moves frequency 0 to the centre (n even): the spectrum comes out centred.
    padded[1::2, :, 0::2] *= -1
    padded[0::2, :, 1::2] *= -1
    spectrum = scipy.fft.fft2(padded, axes=(0, 2), workers=-1)  # (n, B, n) complex64
    pairs = spectrum.view(np.float32)  # (n, B, 2n): real and imaginary parts side by side
    average = _block_average_matrix(s, n_blocks)  # (nb, S)
    nb = n_blocks
    plans = _plan(orientations, s)
    out = np.empty((b, len(plans), nb * nb), dtype=np.float32)
    for f, p in enumerate(plans):
        box = (pairs[p.rows, :, p.cols] * p.gain).view(np.complex64)  # (U, B, V)
        u, _, v = box.shape
        # Two GEMMs; contracting the longer side first costs fewer multiplications.
        if u >= v:
            half = p.left @ box.reshape(u, b * v)  # (S, B*V)
            response = half.reshape(s * b, v) @ p.right  # (S*B, S)
        else:
            half = box.reshape(u * b, v) @ p.right  # (U*B, S)
            response = p.left @ half.reshape(u, b * s)  # (S, B*S)
        magnitude = np.abs(response).reshape(s * b, s)  # [pixel row and image, pixel column]
        cols = (magnitude @ average.T).reshape(s, b * nb)  # [pixel row, image and block column]
        means = (average @ cols).reshape(nb, b, nb)  # [block row, image, block column]
        out[:, f] = means.transpose(1, 2, 0).reshape(b, nb * nb)  # column-major, as MATLAB's
    return out.reshape(b, -1)


# --- images in, features out --------------------------------------------------------------------


def to_gray(images: np.ndarray, image_size: int) -> np.ndarray:
    """uint8 (B, H, W[, C]) -> (B, S, S) float32 stretched to [0, 255] (LMgist's first steps).

    Geometry is the network's (shdh.core.image_input.to_input): 28x28 zero-padded to 32x32, other
    sizes resized bilinearly. Gray is the mean of the channels, as LMgist has it. A constant image
    has no range to stretch and becomes all zeros (LMgist would divide by zero).
    """
    from shdh.core.image_input import to_input  # torch loads only when features are computed

    x = to_input(images, image_size).numpy().mean(axis=1)  # (B, S, S), affine in the pixels
    lo = x.min(axis=(1, 2), keepdims=True)
    span = x.max(axis=(1, 2), keepdims=True) - lo
    return np.divide(255.0 * (x - lo), span, out=np.zeros_like(x), where=span > 0)


def gist_features(
    images: np.ndarray,
    *,
    image_size: int = 32,
    n_blocks: int = 4,
    orientations: Sequence[int] = (8, 8, 8, 8),
    fc_prefilt: float = 4.0,
    batch_size: int = 256,
    progress: bool = False,
) -> np.ndarray:
    """GIST of uint8 images (N, H, W) or (N, H, W, C): (N, sum(orientations) * n_blocks^2) float32.

    The defaults give the paper's 512-D descriptor. `images` may be a np.memmap: batches of
    `batch_size` images bound memory.
    """
    orientations = _check_params(image_size, n_blocks, orientations, fc_prefilt, batch_size)
    _check_images(images)
    n = images.shape[0]
    out = np.empty((n, sum(orientations) * n_blocks**2), dtype=np.float32)
    for start in tqdm(range(0, n, batch_size), desc="gist", disable=not progress):
        batch = np.array(images[start : start + batch_size])  # a writable copy for torch
        gray = to_gray(batch, image_size)
        out[start : start + len(batch)] = _gabor_block_means(
            prefilter(gray, fc_prefilt), orientations, n_blocks
        )
    return out


def _check_images(images: np.ndarray) -> None:
    """An np.ndarray, or an array-like read by rows (a dataset's shards): only slices of
    batch_size rows are read."""
    from shdh.core.image_input import is_image_array  # torch loads only when features run

    if not is_image_array(images):
        raise ValueError(f"gist: images must be a numpy array, got {type(images).__name__}")
    if images.dtype != np.uint8:
        raise ValueError(f"gist: images must be uint8, got dtype {images.dtype}")
    if images.ndim not in (3, 4):
        raise ValueError(f"gist: images must be (N, H, W) or (N, H, W, C), got {images.shape}")
    if 0 in images.shape:
        raise ValueError(f"gist: images must not be empty, got shape {images.shape}")
    if images.ndim == 4 and images.shape[3] not in (1, 3):
        raise ValueError(f"gist: images must have 1 or 3 channels, got {images.shape[3]}")


def _check_params(
    image_size: int,
    n_blocks: int,
    orientations: Sequence[int],
    fc_prefilt: float,
    batch_size: int,
) -> tuple[int, ...]:
    def positive_int(name: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"gist: {name} must be a positive integer, got {value!r}")
        return int(value)

    image_size = positive_int("image_size", image_size)
    n_blocks = positive_int("n_blocks", n_blocks)
    positive_int("batch_size", batch_size)
    if image_size % 2:
        raise ValueError(f"gist: image_size must be even (LMgist's grids are), got {image_size}")
    if n_blocks > image_size:
        raise ValueError(f"gist: n_blocks={n_blocks} exceeds image_size={image_size}")
    if isinstance(orientations, str | bytes) or len(orientations) == 0:
        raise ValueError(f"gist: orientations must be a non-empty list, got {orientations!r}")
    real = isinstance(fc_prefilt, int | float | np.integer | np.floating)
    if isinstance(fc_prefilt, bool) or not real or not np.isfinite(fc_prefilt) or fc_prefilt <= 0:
        raise ValueError(f"gist: fc_prefilt must be a positive number, got {fc_prefilt!r}")
    return tuple(positive_int("orientations", o) for o in orientations)
