"""The library steps, one module each, behind every front door (the CLI commands that DVC runs,
and the Kubeflow components): each reads its inputs from paths, validates them, and writes its
outputs atomically.

    prepare (fetch, prepare) -> tree -> smatrix -> features -> fit -> score -> report

This package imports none of them, so that a step loads only the code it runs (and a DVC stage
depends only on that code: dvc.yaml, tests/unit/test_layers.py).

May import: core, data, features, hashers, nets, plan, ranking, reporting, runtime, tracking,
training, vectordb.
"""
