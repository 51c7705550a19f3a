"""What a finished evaluation shows people: the results tables and the report, the paper's
figures and published numbers, the summary written onto the pipeline's parent run and the MLflow
UI's saved comparison view.

May import: core, hashers, nets, ranking, runtime, tracking, training.
"""
