"""Ranking by weighted Hamming distance (paper Eq. 4), exactly and with deterministic ties, for the
offline evaluation and for the search service alike: bit packing and the exact ranking of every
query (exact, compiled in exact_kernel), the search index on disk and its answers (search_index,
index_file), and the service's faster path to the same order over a fixed database
(service_ranker, compiled in service_kernel).

May import: runtime.
"""
