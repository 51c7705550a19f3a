"""index: the search index of the database, encoded by the encoder the register task registered."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Output

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def index(
    prepared: Input[Dataset],
    similarity: Input[Dataset],
    model_name: str,
    alias: str,
    search_index: Output[Dataset],
):
    """Encode the database with models:/NAME@ALIAS and write the search index (shdh index).

    Inputs:
        prepared: the dataset folder from `prepare` (the database items of the split).
        similarity: the S-matrix from `smatrix` (the items' ancestors, for the shared levels).
        model_name: the registered model's name (the register task's).
        alias: the alias the register task pointed at its new version.
    Outputs:
        search_index: index.npz and index.json (shdh.search), which `shdh serve` loads; its
            metadata names the encoder's registered version.
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    from shdh.steps.index import build_index, registered_encoder

    hasher, encoder = registered_encoder(model_name, alias)
    build_index(
        hasher,
        prepared_dir=prepared.path,
        smatrix_path=similarity.path,
        out_dir=search_index.path,
        encoder=encoder,
    )
    search_index.metadata.update({f"encoder_{key}": str(value) for key, value in encoder.items()})
