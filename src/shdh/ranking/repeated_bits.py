"""Eq. 4 as a plain Hamming distance: each segment's bits repeated as many times as its integer
weight, so that a store which ranks by Hamming distance only (Milvus's BINARY_VECTOR with the
HAMMING metric, faiss's binary indexes) ranks by the weighted distance itself.

Why it is exact: the weighted distance is sum_k w_k * popcount((q xor x) & mask_k) with small
integer w_k (`shdh.ranking.exact.integer_weights`: K+1-k for SHDH), and a bit that appears w_k
times in both codes differs w_k times or not at all. So the Hamming distance of the repeated
codes is the integer distance the in-process ranking computes, tie for tie; dividing it by the
weights' scale (`shdh.ranking.index_file.distance_scale`) gives Eq. 4's float distance. A segment
of weight 0 contributes no bits. The repeated code is padded with zero bits to whole bytes (a
BINARY_VECTOR's dimension is a multiple of 8), which never differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shdh.ranking.exact import check_n_bits, check_packed, distance_layout

# Milvus's largest BINARY_VECTOR: 32,768 dimensions of 8 bits (its proxy.maxDimension, in bytes
# for binary vectors).
MAX_REPEATED_BITS = 32_768 * 8
# Codes expanded at a time: the unpacked bits of 65,536 codes of 64 bits are 4 MiB.
_CHUNK = 1 << 16


@dataclass(frozen=True)
class RepeatedBits:
    """How codes of `segment_sizes` with integer `weights` are repeated: output bit j is input
    bit `source[j]`; `n_bits` is the repeated code's length, a multiple of 8."""

    segment_sizes: tuple[int, ...]
    weights: tuple[int, ...]
    source: np.ndarray  # (n_bits - padding,) int64
    n_bits: int

    @property
    def in_bits(self) -> int:
        return int(sum(self.segment_sizes))

    def expand(self, packed: np.ndarray) -> np.ndarray:
        """(N, ceil(in_bits/8)) packed codes -> (N, n_bits/8) packed repeated codes."""
        packed = check_packed("codes", packed)
        check_n_bits(packed, self.in_bits, "codes")
        out = np.zeros((len(packed), self.n_bits // 8), dtype=np.uint8)
        for start in range(0, len(packed), _CHUNK):
            bits = np.unpackbits(packed[start : start + _CHUNK], axis=1)
            wide = np.zeros((len(bits), self.n_bits), dtype=np.uint8)
            wide[:, : len(self.source)] = bits[:, self.source]
            out[start : start + _CHUNK] = np.packbits(wide, axis=1)
        return out


def repeated_bits(segment_sizes: Sequence[int], int_weights: Sequence[int]) -> RepeatedBits:
    """The repetition of codes with these segments and integer weights (checked as the ranking
    checks them); an error when the repeated code would be longer than Milvus takes."""
    sizes = [int(s) for s in segment_sizes]
    weights = [int(w) for w in int_weights]
    distance_layout(sizes, weights, -(-sum(sizes) // 8))  # the same checks as the ranking's
    starts = np.cumsum([0, *sizes[:-1]])
    source = np.concatenate(
        [
            np.tile(np.arange(start, start + size), weight)
            for start, size, weight in zip(starts, sizes, weights, strict=True)
        ]
    ).astype(np.int64)
    n_bits = -(-len(source) // 8) * 8
    if n_bits > MAX_REPEATED_BITS:
        raise ValueError(
            f"segments {sizes} with integer weights {weights} repeat into {len(source)} bits; "
            f"a BINARY_VECTOR holds at most {MAX_REPEATED_BITS}: use fewer bits or levels"
        )
    return RepeatedBits(tuple(sizes), tuple(weights), source, n_bits)
