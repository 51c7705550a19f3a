"""The method's mathematics, as the paper writes it: the label tree (hierarchy, built from the
fields of tree_fields), the level weights and code segments (level_weights, Eq. 2), the
hierarchical similarity (similarity, Eq. 1-3) and the S artifact (smatrix), the losses (losses:
SHDH's J, Eq. 5-8, and DPSH's likelihood) with their settings (loss_settings) and the objects a
trainer takes (objectives), the retrieval metrics (metrics: ACG, DCG, NDCG, weighted recall;
peer_metrics: the peers' mAP@R and mAHP@R; relevance: what they weigh items by; metric_kernel:
the one ranking pass per query they are taken from), the codes-file contract (codes_file) and
the images' input geometry (image_input). Torch, numpy and numba only: a notebook, or a bare GPU
machine, uses it alone.

May import: ranking, runtime.
"""
