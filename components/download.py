"""download: fetch the raw files, convert them to the dataset format and make the split."""

from kfp import dsl
from kfp.dsl import Dataset, Output

from components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def download(data: str, seed: int, prepared: Output[Dataset]):
    """Fetch and convert the raw dataset (shdh fetch + shdh download).

    Inputs:
        data: the `data` section of params.yaml as JSON (dataset, sources, raw_dir, verify,
            query_fraction, max_items, and for own data the readers' settings: image_size,
            color, skip_bad_images, workers, inner_labels, name, table).
        seed: the master seed (the query/database split, the max_items subset).
    Outputs:
        prepared: the dataset folder and split written by shdh.steps.download; its metadata
            holds `dataset` and `dvc_data_md5`, the raw files' hash as data.dvc records it.
    """
    import tempfile
    from pathlib import Path

    from shdh import steps, tracking
    from shdh.stages.pipeline import section_arg

    cfg = section_arg(data, "data")
    with tempfile.TemporaryDirectory(prefix="shdh-raw-") as work:
        # The raw files land at raw_dir under a scratch folder, as in the repository, so the
        # folder data.dvc tracks (raw_dir's first part, `data`) hashes as DVC hashes it.
        raw_dir = Path(cfg["raw_dir"]).relative_to(Path(cfg["raw_dir"]).anchor)
        raw = steps.fetch(Path(work) / raw_dir, dataset=cfg["dataset"], sources=cfg["sources"],
                          verify=cfg.get("verify", True))  # fmt: skip
        steps.download(raw, prepared.path, seed=seed, **steps.download_options(cfg))
        prepared.metadata["dataset"] = cfg["dataset"]
        prepared.metadata["dvc_data_md5"] = tracking.dvc_dir_md5(Path(work) / raw_dir.parts[0])
