"""prepare: bring the raw files of the data version (DVC; the public download on a local run,
or where data.download_fallback allows it), convert them to the dataset format and make the
split."""

from kfp import dsl
from kfp.dsl import Dataset, Output

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def prepare(data: str, seed: int, prepared: Output[Dataset], data_version: str = ""):
    """Pull the raw dataset of data.dvc's version, or fetch it, and convert it (shdh prepare).

    Inputs:
        data: the `data` section of params.yaml as JSON (dataset, sources, raw_dir, verify,
            download_fallback, query_fraction, max_items, and for own data the readers'
            settings: image_size, color, skip_bad_images, workers, inner_labels, name, table).
        seed: the master seed (the query/database split, the max_items subset).
        data_version: data.dvc and .dvc/config of the checkout the pipeline was compiled from
            (shdh.data.dvc_pull.data_version): `dvc pull` of exactly that version from that
            remote. A failed pull fails the step, naming the remote, what DVC said and `dvc
            push`; with data.download_fallback true it logs that as a warning and the raw
            files come from the public download of data.sources instead. Empty (a local run):
            the public download.
    Outputs:
        prepared: the dataset folder and split written by shdh.steps.prepare.prepare; its metadata
            holds `dataset`, `dvc_data_md5` (the raw files' hash as data.dvc records it) and
            `data_source` (dvc or download).
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    import tempfile
    from pathlib import Path

    from shdh.data.dataset import read_meta
    from shdh.kubeflow import section_arg
    from shdh.steps.dvc_pull import pull_or_fetch
    from shdh.steps.prepare import prepare, prepare_options

    cfg = section_arg(data, "data")
    with tempfile.TemporaryDirectory(prefix="shdh-raw-") as work:
        raw = pull_or_fetch(data_version, work, cfg)
        prepare(raw.path, prepared.path, seed=seed, **prepare_options(cfg))
        # named as the converter named it (`shapes`, not the reader `folder`): the runs' tag
        # and the report's title; its meta.json alone says it
        meta = Path(prepared.path) / "dataset" / "meta.json"
        name = read_meta(meta.read_text(), meta)["name"]
        prepared.metadata.update(dataset=name, dvc_data_md5=raw.md5, data_source=raw.source)
