"""MLflow and the object store: the runs the pipeline logs, where they go, the pipeline's parent
run, the deep encoders as MLflow models, the Model Registry and a fit's checkpoints kept in S3.
MLflow is imported lazily, so a step that tracks nothing does not load it.

May import: core, data, hashers, nets, plan, ranking, runtime, training.
"""
