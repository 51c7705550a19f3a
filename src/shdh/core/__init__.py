"""The method's mathematics, as the paper writes it: the label tree, the level weights and code
segments (Eq. 2), the hierarchical similarity (Eq. 1-3) and the S artifact, the pairs of a
training batch, the retrieval metrics (the paper's and the peers') and the one ranking pass they
are taken from, the codes-file contract and the images' input geometry. Torch, numpy and numba
only: a notebook, or a bare GPU machine, uses it alone.

May import: ranking, runtime.
"""
