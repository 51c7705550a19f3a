"""index: the search index of the database, encoded by the encoder the register task registered."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Output

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def index(
    prepared: Input[Dataset],
    similarity: Input[Dataset],
    labels: Input[Dataset],
    model_name: str,
    alias: str,
    search_index: Output[Dataset],
    engine: str = "memory",
    milvus_uri: str = "",
    milvus_collection: str = "",
    milvus_index: str = "BIN_FLAT",
    milvus_nlist: int = 1024,
):
    """Encode the database with models:/NAME@ALIAS and write the search index (shdh index).

    Inputs:
        prepared: the dataset folder from `prepare` (the database items of the split).
        similarity: the S-matrix from `smatrix` (the items' ancestors, for the shared levels).
        labels: the tree step's folder (the label tree a Milvus collection keeps).
        model_name: the registered model's name (the register task's).
        alias: the alias the register task pointed at its new version.
        engine: params.yaml's index.engine: memory (the index files) or milvus (a collection).
        milvus_uri: with milvus, where the collection goes; on a cluster SHDH_MILVUS_URI (from
            the ConfigMap) wins, and the token is SHDH_MILVUS_TOKEN (from a Secret).
        milvus_collection: the collection ("": named for the encoder's model, version, run).
        milvus_index, milvus_nlist: the collection's index (index.milvus_index, milvus_nlist).
    Outputs:
        search_index: index.npz and index.json (shdh.search), which `shdh serve` loads, or the
            collection's record (collection.json); its metadata names the encoder's registered
            version.
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    import os

    from shdh.steps.index import build_index, registered_encoder
    from shdh.vectordb.writer import CollectionTarget

    hasher, encoder = registered_encoder(model_name, alias)
    target = None
    if engine == "milvus":
        uri = os.environ.get("SHDH_MILVUS_URI") or milvus_uri
        target = CollectionTarget(uri, None, milvus_collection or None, milvus_index, milvus_nlist)
    build_index(
        hasher,
        prepared_dir=prepared.path,
        smatrix_path=similarity.path,
        out_dir=search_index.path,
        encoder=encoder,
        milvus=target,
        tree_dir=labels.path,
    )
    search_index.metadata.update({f"encoder_{key}": str(value) for key, value in encoder.items()})
