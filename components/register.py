"""register: the best encoder of the run into the MLflow Model Registry, under an alias."""

from kfp import dsl

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def register(parent_run_id: str, model_name: str, metric: str, alias: str) -> str:
    """Register the encoder of the method run with the highest `metric` under this pipeline
    run (shdh register), point `alias` at the new version, and load it back by that alias.

    Inputs:
        parent_run_id: the pipeline's MLflow parent run (from `start`).
        model_name: the registered model's name.
        metric: the metric that picks the best run (highest wins), e.g. ndcg_at_100.
        alias: the alias given to the new version, e.g. champion.
    Outputs:
        Output: the model URI by alias, models:/NAME@ALIAS.
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    from shdh.tracking import model_registry

    done = model_registry.register_best(parent_run_id, model_name, metric=metric, alias=alias)
    model_registry.check_loaded(model_registry.load_by_alias(done.name, done.alias))
    return done.uri
