"""Ranking by weighted Hamming distance (paper Eq. 4), exactly and with deterministic ties, for the
offline evaluation and for the search service alike: bit packing, the exact ranking of every
query, the search index on disk and its answers, and the service's faster path to the same order
over a fixed database.

May import: runtime.
"""
