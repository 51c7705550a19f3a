"""COSDISH and COSDISH+H: column-sampling discrete supervised hashing (Kang, Li & Zhou, AAAI 2016).

COSDISH learns the training codes B in {-1,+1}^{N x q} directly, without relaxing them, from
min_B ||q S - B B^T||_F^2. S is N x N, so each of `n_outer` iterations samples a column set Omega
and only ever looks at two blocks cut by `pairs.block`: S[Gamma, Omega] (Gamma = the other rows)
and S[Omega, Omega]. On those columns the objective

    F(B) = ||q S_GO - B_G B_O^T||_F^2 + ||q S_OO - B_O B_O^T||_F^2

splits into two easy halves, alternated `n_alternations` times:
- B_O, bit by bit: with every other bit fixed, one bit of B_O is a binary quadratic program
  (BQP) min_b b^T Q b + p^T b over |Omega| signs (`bit_bqp`, `solve_bqp`);
- B_G = sgn(S_GO B_O), row by row (the paper's closed form; a zero keeps the old bit).
Most pairs are dissimilar (9 in 10 with 10 classes) and no code can give every dissimilar pair
the target -q, so by default the negative part of the sampled block is scaled so that it weighs
as much as the positive part (`balance_block`), as the authors' code does.
The codes then become out-of-sample hash functions by ridge regression, one linear predictor
per bit on standardised features: h(x) = sgn(z(x) W + c).

COSDISH+H is the same code given Eq. 3's hierarchical s_ij in [-1, 1] instead of the +-1
same-leaf labels: Q and p are linear in S and sgn(S_GO B_O) takes real S as it is, so nothing
else changes. The two classes differ only in their `name` and `supervision`.

Where this deviates from the authors' MATLAB code (COSDISH.m, Solve.m), and why:
- The BQP is solved by spectral rounding (power iteration on the homogenised BQP) plus greedy
  single-sign flips, started from the better of the rounding and the current bit, so a step
  never raises F. The original takes the best balanced two-way split of a Cholesky embedding
  of the homogenised BQP, which neither starts from the current bit nor guarantees a decrease.
- Bit k is fitted with all other bits fixed (exact block-coordinate descent on F). The original
  subtracts only bits 1..k-1, a greedy residual fit that ignores the later bits' current values.
- Class balance scales dissimilar pairs to -r (r = positive mass / negative mass of the block),
  the sign the same lab's ADSH code uses; COSDISH.m maps them to +r, a positive target for
  dissimilar pairs, which looks like a slip.
- The ridge regression has an unpenalised intercept; features are standardised per dimension.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shdh.hashers.base import Hasher
from shdh.hashers.method_settings import COSDISHSettings
from shdh.hashers.validation import check_features, check_int

# Rows of X turned into float64 at once (ridge statistics, encoding): 16k x d values.
_CHUNK = 16384
# Greedy flips per BQP at most, per variable: a safety net; each flip strictly lowers the
# objective, and in practice descent stops after fewer than |Omega| flips.
_FLIPS_PER_VARIABLE = 20
# Power iterations for the spectral rounding. Not LAPACK's eigh: on a busy 2-core machine its
# threaded calls on 33-65 square matrices took 15-45 ms each (1-3 ms on one thread), and the
# fit makes n_outer x n_alternations x n_bits of them; matrix-vector products do not thread.
# 100 iterations matched eigh's rounding quality on random 14-variable BQPs (brute-forced).
_POWER_ITERATIONS = 100


class COSDISH(Hasher):
    """COSDISH on +-1 same-leaf pair labels (the paper's plain baseline)."""

    supervision = "label"

    def __init__(
        self,
        *,
        n_bits: int,
        seed: int = 0,
        n_outer: int = COSDISHSettings.n_outer,
        n_alternations: int = COSDISHSettings.n_alternations,
        n_sampled: int | None = COSDISHSettings.n_sampled,
        ridge: float = COSDISHSettings.ridge,
        balance: bool = COSDISHSettings.balance,
    ) -> None:
        """The defaults are COSDISHSettings' (shdh.hashers.method_settings), the paper's and the
        authors'. n_sampled = |Omega| (None: n_bits): the sampled blocks cost O(N |Omega| q) per
        alternation and one BQP has |Omega| variables."""
        super().__init__(n_bits=n_bits, seed=seed)
        self.n_outer = n_outer
        self.n_alternations = n_alternations
        self.n_sampled = n_sampled
        self.ridge = ridge
        self.balance = balance

    def _fit(self, X: np.ndarray, pairs: Any) -> None:
        X = check_features(X, self.name)
        n_bits = check_int(self.name, "n_bits", self.n_bits, 1)
        n_outer = check_int(self.name, "n_outer", self.n_outer, 1)
        n_alt = check_int(self.name, "n_alternations", self.n_alternations, 1)
        n_sampled = n_bits if self.n_sampled is None else self.n_sampled
        n_sampled = check_int(self.name, "n_sampled", n_sampled, 1)
        if n_sampled > len(X):
            raise ValueError(
                f"{self.name}: n_sampled={n_sampled} columns cannot be sampled from {len(X)} items"
            )
        ridge = self.ridge
        real = isinstance(ridge, int | float | np.integer | np.floating)
        if isinstance(ridge, bool) or not real or not (np.isfinite(ridge) and ridge > 0):
            raise ValueError(f"{self.name}: ridge must be a finite number > 0, got {ridge!r}")
        if not isinstance(self.balance, bool | np.bool_):
            raise ValueError(f"{self.name}: balance must be True or False, got {self.balance!r}")
        codes = learn_codes(
            pairs,
            n_bits=n_bits,
            n_sampled=n_sampled,
            n_outer=n_outer,
            n_alternations=n_alt,
            rng=self._rng(),
            balance=bool(self.balance),
        )
        self.mean_, self.scale_, self.weights_, self.bias_ = fit_ridge(X, codes, float(ridge))

    def _encode(self, X: np.ndarray) -> np.ndarray:
        X = check_features(X, self.name, n_features=self.weights_.shape[0])
        out = np.empty((len(X), self.weights_.shape[1]))
        for start in range(0, len(X), _CHUNK):
            z = (X[start : start + _CHUNK].astype(np.float64) - self.mean_) / self.scale_
            out[start : start + _CHUNK] = z @ self.weights_ + self.bias_
        return out

    def _after_load(self) -> None:
        _check_state(self)


class COSDISHH(COSDISH):
    """COSDISH+H: COSDISH given Eq. 3's hierarchical s_ij instead of same-leaf labels."""

    supervision = "hierarchical"


# --- discrete code learning ---------------------------------------------------------------------


def learn_codes(
    pairs: Any,
    *,
    n_bits: int,
    n_sampled: int,
    n_outer: int,
    n_alternations: int,
    rng: np.random.Generator,
    balance: bool = True,
) -> np.ndarray:
    """Training codes B (N, n_bits) int8 in {-1,+1}: column sampling + discrete alternation.

    Memory is O(N |Omega|): only the sampled columns of S ever exist. The N-row arrays stay
    float32 (what `pairs.block` returns; +-1 codes are exact in it), which halves the cost of
    the N-sized products.
    """
    n, q = pairs.n_items, n_bits
    codes = (2 * rng.integers(0, 2, size=(n, q)) - 1).astype(np.float32)
    for _ in range(n_outer):
        omega = np.sort(rng.choice(n, size=n_sampled, replace=False))
        rest = np.ones(n, dtype=bool)
        rest[omega] = False
        gamma = np.flatnonzero(rest)
        s_go = pairs.block(gamma, omega).astype(np.float32)  # (N - |Omega|, |Omega|)
        s_oo = pairs.block(omega, omega).astype(np.float64)  # (|Omega|, |Omega|)
        if balance:
            s_go, s_oo = balance_block(s_go, s_oo)
        b_o, b_g = codes[omega], codes[gamma]
        for _ in range(n_alternations):
            b_o = update_sampled(b_o, b_g, s_go, s_oo, q)
            b_g = update_unsampled(s_go, b_o, b_g)
        codes[omega], codes[gamma] = b_o, b_g
    return codes.astype(np.int8)


def balance_block(s_go: np.ndarray, s_oo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scale the negative s_ij of the sampled columns by r = (sum of positive s) / (sum of |negative
    s|), so both parts weigh the same; with +-1 labels, dissimilar pairs become -r.

    Without it the many dissimilar pairs dominate F and push every class's code away from the
    rest at once, which no code can do. A block without positive or without negative pairs is
    left as it is (r would be 0 or undefined). Only the negative part changes, so COSDISH+H keeps
    Eq. 3's graded positive values.
    """
    pos = float(s_go[s_go > 0].sum(dtype=np.float64) + s_oo[s_oo > 0].sum(dtype=np.float64))
    neg = -float(s_go[s_go < 0].sum(dtype=np.float64) + s_oo[s_oo < 0].sum(dtype=np.float64))
    if pos <= 0 or neg <= 0:
        return s_go, s_oo
    r = pos / neg  # a Python float: the blocks keep their dtype
    return np.where(s_go < 0, r * s_go, s_go), np.where(s_oo < 0, r * s_oo, s_oo)


def sampled_objective(
    b_o: np.ndarray, b_g: np.ndarray, s_go: np.ndarray, s_oo: np.ndarray, q: int
) -> float:
    """F(B) = ||q S_GO - B_G B_O^T||^2 + ||q S_OO - B_O B_O^T||^2: what one outer step lowers."""
    return float(((q * s_go - b_g @ b_o.T) ** 2).sum() + ((q * s_oo - b_o @ b_o.T) ** 2).sum())


def update_sampled(
    b_o: np.ndarray, b_g: np.ndarray, s_go: np.ndarray, s_oo: np.ndarray, q: int
) -> np.ndarray:
    """New B_O: one BQP per bit, each with all other bits (and B_G) fixed; F never increases.

    B_G^T S_GO and B_G^T B_G do not change while B_O is updated, so the N-sized products are
    computed once here and each bit's BQP costs O(|Omega|^2 q).
    """
    m = b_o.shape[0]
    b_o = b_o.astype(np.float64)
    # One product gives both (S_GO^T B_G) and (B_G^T B_G): two separate threaded BLAS calls
    # were up to 30x slower on a busy machine. float32 is exact for B_G^T B_G (|entries| <= N).
    both = np.concatenate([s_go, b_g], axis=1, dtype=np.float32).T @ b_g.astype(np.float32)
    a = q * both[:m].astype(np.float64)  # (|Omega|, q): (q S_GO)^T B_G
    h = both[m:].astype(np.float64)  # (q, q): B_G^T B_G
    t_oo = q * np.asarray(s_oo, dtype=np.float64)
    gram = b_o @ b_o.T  # kept equal to B_O B_O^T (exact: small integers in float64)
    for k in range(b_o.shape[1]):
        Q, p = bit_bqp(k, b_o, gram, t_oo, a, h)
        new = solve_bqp(Q, p, b_o[:, k])
        gram += np.outer(new, new) - np.outer(b_o[:, k], b_o[:, k])
        b_o[:, k] = new
    return b_o


def bit_bqp(
    k: int, b_o: np.ndarray, gram: np.ndarray, t_oo: np.ndarray, a: np.ndarray, h: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(Q, p) with F(B_O with column k = b) = b^T Q b + p^T b + const, all other bits fixed.

    gram = B_O B_O^T, t_oo = q S_OO, a = (q S_GO)^T B_G, h = B_G^T B_G. Expanding F in column k:
    - Omega rows: ||T - R - b b^T||^2 with R = sum_{t != k} b_t b_t^T gives Q = -2 (T - R);
      its diagonal multiplies b_i^2 = 1, a constant, so it is zeroed;
    - Gamma rows: ||q S_GO - sum_{t != k} g_t b_t^T - g_k b^T||^2 gives
      p = -2 (a_k - sum_{t != k} b_t h_tk), with g_t the columns of B_G.
    """
    b_k = b_o[:, k]
    Q = -2.0 * (t_oo - gram + np.outer(b_k, b_k))
    np.fill_diagonal(Q, 0.0)
    p = -2.0 * (a[:, k] - b_o @ h[:, k] + b_k * h[k, k])
    return Q, p


def update_unsampled(s_go: np.ndarray, b_o: np.ndarray, old: np.ndarray) -> np.ndarray:
    """B_G = sgn(S_GO B_O), the paper's closed form; where S_GO B_O is zero, keep the old bit.

    Zero is a real tie (e.g. +-1 labels summing to 0), but float32 s_ij such as 1/3 carry
    rounding noise of about 1e-8 per term; |score| <= 1e-6 |Omega| counts as a tie, so the
    noise cannot pick a sign. Keeping the old bit makes ties deterministic and harmless.
    """
    score = s_go @ b_o.astype(s_go.dtype)
    tol = 1e-6 * max(1, b_o.shape[0])
    return np.where(np.abs(score) <= tol, old, np.where(score > 0, 1, -1)).astype(old.dtype)


def bqp_objective(Q: np.ndarray, p: np.ndarray, b: np.ndarray) -> float:
    return float(b @ Q @ b + p @ b)


def solve_bqp(Q: np.ndarray, p: np.ndarray, start: np.ndarray) -> np.ndarray:
    """An approximate minimiser of b^T Q b + p^T b over b in {-1,+1}^n, never worse than start.

    Q is symmetric with a zero diagonal. Spectral rounding: homogenise with an extra sign
    x_0 = 1, M = [[Q, p/2], [p^T/2, 0]], relax x to the sphere ||x||^2 = n + 1, whose minimiser
    is M's bottom eigenvector; power iteration on A = (c I - M) / 2c (c = the largest absolute
    row sum, so A's eigenvalues lie in [0, 1] and its top one is >= 1/2: no overflow, no
    underflow, no normalising needed for signs) finds it from x = [start, 1]. Its signs,
    flipped so that x_0 = +1, compete with `start` (which wins ties); greedy flips then
    improve the winner.
    """
    n = p.shape[0]
    start = np.asarray(start, dtype=np.float64)
    M = np.zeros((n + 1, n + 1))
    M[:n, :n] = Q
    M[:n, n] = M[n, :n] = p / 2
    c = np.abs(M).sum(axis=1).max()
    if c == 0.0:  # Q = 0 and p = 0: every b is optimal
        return start.copy()
    A = (c * np.eye(n + 1) - M) / (2 * c)
    x = np.append(start, 1.0)
    for _ in range(_POWER_ITERATIONS):
        x = A @ x
    signs = np.where(x >= 0, 1.0, -1.0)
    spectral = signs[:n] * signs[n]
    better = bqp_objective(Q, p, spectral) < bqp_objective(Q, p, start)
    return flip_descent(Q, p, spectral if better else start.copy())


def flip_descent(Q: np.ndarray, p: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Flip the single sign that lowers b^T Q b + p^T b most (lowest index on ties), until none
    does. Flipping b_i changes the objective by -2 b_i g_i with g = 2 Q b + p (zero diagonal)."""
    g = 2.0 * (Q @ b) + p
    tol = 1e-12 * (np.abs(Q).sum() + np.abs(p).sum() + 1.0)
    for _ in range(_FLIPS_PER_VARIABLE * len(b)):
        change = -2.0 * b * g
        i = int(np.argmin(change))
        if change[i] >= -tol:
            break
        b[i] = -b[i]
        g += 4.0 * b[i] * Q[:, i]
    return b


# --- out-of-sample hash functions ---------------------------------------------------------------


def fit_ridge(
    X: np.ndarray, codes: np.ndarray, ridge: float, chunk: int = _CHUNK
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(mean, scale, W, c): per bit, ridge regression of the codes on z = (x - mean) / scale,
    min ||Z W + 1 c^T - B||^2 + ridge ||W||^2 with c unpenalised, so c = mean(B) because Z is
    centred. Streams X in float64 chunks: 63,000 x 512 never exists as a float64 copy."""
    n, d = X.shape
    mean = np.zeros(d)
    for start in range(0, n, chunk):
        mean += X[start : start + chunk].sum(axis=0, dtype=np.float64)
    mean /= n
    targets = codes.astype(np.float64)
    bias = targets.mean(axis=0)
    gram, xtb = np.zeros((d, d)), np.zeros((d, codes.shape[1]))
    for start in range(0, n, chunk):
        z = X[start : start + chunk].astype(np.float64) - mean
        gram += z.T @ z
        xtb += z.T @ (targets[start : start + chunk] - bias)
    scale = np.sqrt(np.diag(gram) / n)
    scale[scale <= 1e-10 * np.maximum(np.abs(mean), 1.0)] = 1.0  # constant dimensions: z = 0
    gram /= np.outer(scale, scale)
    xtb /= scale[:, None]
    import scipy.linalg  # lazy: the hashers import with numpy alone (a bare GPU machine)

    weights = scipy.linalg.solve(gram + ridge * np.eye(d), xtb, assume_a="pos")
    return mean, scale, weights, bias


# --- input checks -------------------------------------------------------------------------------


def _check_state(hasher: Any) -> None:
    """A state.npz that does not match params.json (edited, or from another bit length)
    would encode garbage silently: refused here."""
    missing = [k for k in ("mean_", "scale_", "weights_", "bias_") if not hasattr(hasher, k)]
    if missing:
        raise ValueError(f"{hasher.name}: saved state lacks the arrays {missing}")
    d = hasher.mean_.shape[0] if hasher.mean_.ndim == 1 else -1
    shapes = {
        "mean_": (hasher.mean_.shape, (d,)),
        "scale_": (hasher.scale_.shape, (d,)),
        "weights_": (hasher.weights_.shape, (d, hasher.n_bits)),
        "bias_": (hasher.bias_.shape, (hasher.n_bits,)),
    }
    for key, (got, want) in shapes.items():
        if got != want:
            raise ValueError(
                f"{hasher.name}: saved state '{key}' has shape {got}, expected {want} for "
                f"n_bits={hasher.n_bits}"
            )
