"""What a service answers with (an index, its encoder and the database's images and labels,
loaded together) and the switch to a new one.

The index is the in-process one (shdh.ranking.search_index, read from a folder or S3) or, with
the Milvus engine, a collection (shdh.vectordb.collection_index, named for the encoder unless
the service names it), whose record the encoder is checked against in the same way.

Every request reads `Service.current` once and answers wholly from that `Loaded`. A reload
builds the next `Loaded` completely (the index read and checked, the encoder loaded and checked
against it) while requests go on being answered by the old one, then replaces the one reference:
a request in flight finishes on the version it started with and none waits or fails. A reload
that fails leaves the old version serving. One reload runs at a time.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shdh.ranking.search_index import SearchIndex
from shdh.serving.collection_source import CollectionSource
from shdh.serving.encoders import EncoderSource, ImageEncoder
from shdh.serving.index_source import IndexSource, index_source
from shdh.serving.labels import ItemLabels
from shdh.serving.thumbnails import DatasetImages
from shdh.vectordb.collection_index import CollectionIndex

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Loaded:
    """One version of what the service answers with; `generation` counts the loads."""

    index: Any  # SearchIndex, or a vectordb CollectionIndex (the Milvus engine)
    encoder: ImageEncoder | None
    generation: int
    images: DatasetImages | None = None
    recall: float | None = None  # the Milvus engine's recall@100 against exact, at the load

    @property
    def engine(self) -> str:
        """milvus for a collection; memory for the in-process index (or a stand-in with its
        methods, as the benchmarks put in)."""
        return "milvus" if isinstance(self.index, CollectionIndex) else "memory"

    @property
    def n_items(self) -> int:
        """Items served now (a collection's count changes as items are added and removed)."""
        return len(self.index.item_ids) if self.engine == "memory" else self.index.n_items

    @property
    def labels(self) -> ItemLabels | None:
        return None if self.images is None else self.images.labels

    def describe(self) -> dict[str, Any]:
        record = self.index.record
        return {
            "generation": self.generation,
            "created": record.get("created"),  # a collection's; an index file holds none
            "method": record.get("method"),
            "dataset": record.get("dataset"),
            "bits": self.index.n_bits,
            "n_items": self.n_items,
            "encoder": record.get("encoder"),
            "image_shape": None if self.encoder is None else list(self.encoder.image_shape),
            "engine": self.engine,
        }


def check_match(
    index: SearchIndex, encoder: ImageEncoder, index_dir: str | Path, source: EncoderSource
) -> None:
    """An encoder whose codes the index can rank: the same code length, the same registered
    version when both name one, and the same training run when both name one (an alias moved
    on without a rebuilt index would give codes from another model, ranked as if they were
    comparable). An index built from the registry names its version alone (shdh.steps.index):
    served by a fit's folder, which has no version, only its method and length are checked."""
    where = source.describe()
    rebuild = f"rebuild the index with it first (`shdh index {source.index_arguments()}`)"
    if encoder.n_bits != index.n_bits:
        raise ValueError(
            f"{where}: the encoder makes {encoder.n_bits}-bit codes but the index in "
            f"{index_dir} holds {index.n_bits}-bit codes"
        )
    indexed_method = index.record.get("method")
    if encoder.method and indexed_method and encoder.method != indexed_method:
        raise ValueError(
            f"{where}: the encoder is {encoder.method}'s but the index in {index_dir} holds "
            f"{indexed_method}'s codes; give the encoder the index was built with, or {rebuild}"
        )
    indexed = index.record.get("encoder") or {}
    served = (encoder.name, encoder.version)
    indexed_version = (indexed.get("name"), indexed.get("version"))
    if all(served) and all(indexed_version) and served != tuple(map(str, indexed_version)):
        raise ValueError(
            f"{where}: the encoder is version {served[1]} of {served[0]} but the index in "
            f"{index_dir} was encoded by version {indexed_version[1]} of {indexed_version[0]}; "
            f"{rebuild}"
        )
    indexed_run = indexed.get("run_id")
    if encoder.run_id and indexed_run and encoder.run_id != indexed_run:
        raise ValueError(
            f"{where}: the encoder comes from run {encoder.run_id} but the index in {index_dir} "
            f"was encoded by run {indexed_run}; {rebuild}"
        )


def check_dataset(index: SearchIndex, images: DatasetImages, where: str) -> None:
    """Images and labels of the dataset the index was built from: another one's would put wrong
    label paths and thumbnails on every hit."""
    indexed = index.record.get("dataset")
    if indexed and images.name != indexed:
        raise ValueError(
            f"{images.prepared_dir}: the images are of dataset {images.name} but the index in "
            f"{where} holds dataset {indexed}; give --images the prepared folder it was built from"
        )


def load_index(
    source: IndexSource | CollectionSource, encoder_source: EncoderSource | None
) -> tuple[Any, ImageEncoder | None, float | None]:
    """The index and the encoder, checked against each other (a collection named for the
    encoder is found by it, so the encoder loads first there), and the index's recall (None:
    exact)."""
    collection = isinstance(source, CollectionSource)
    index = None if collection else SearchIndex.load(source.fetch())
    encoder = None if encoder_source is None else encoder_source.load()
    recall = None
    if collection:
        index, recall = source.load(encoder)
    if encoder is not None:
        check_match(index, encoder, source.describe(), encoder_source)
    return index, encoder, recall


class Service:
    """The current `Loaded` (None until the first load) and how to load the next one: `index`
    is an index folder, an s3:// prefix (copied anew on every load) or an `IndexSource`."""

    def __init__(
        self,
        index: str | Path | IndexSource | CollectionSource,
        encoder: EncoderSource | None,
        images: DatasetImages | None = None,
    ) -> None:
        self.index_source = index_source(index) if isinstance(index, str | Path) else index
        self.encoder_source = encoder
        self.images = images
        self._first_copy = images  # read by the caller just now: what the first load serves
        self.current: Loaded | None = None
        self.last_error: str | None = None
        self.loads_failed = 0  # for /metrics: a failed reload leaves the old version serving
        self._reloading = threading.Lock()
        self._generation = 0

    def reload(self) -> Loaded:
        """Load the index and the encoder anew, then switch to them; on failure the previous
        version keeps serving and the error is raised (and kept for /readyz)."""
        with self._reloading:
            try:
                index, encoder, recall = load_index(self.index_source, self.encoder_source)
                images = self._images_now()
                if images is not None:
                    check_dataset(index, images, self.index_source.describe())
            except Exception as exc:
                self.last_error = str(exc)
                self.loads_failed += 1
                log.error("loading the index or the encoder failed: %s", exc)
                raise
            self._generation += 1
            loaded = Loaded(index, encoder, self._generation, images, recall)
            self.current = loaded  # the switch: one reference, replaced whole
            self.last_error = None
            log.info("serving generation %d: %s", loaded.generation, loaded.describe())
            return loaded

    def _images_now(self) -> DatasetImages | None:
        """The database's images as the folder holds them now: the caller's copy for the first
        load, read anew for every later one (the prepare step that rebuilt the index rebuilt
        them)."""
        first, self._first_copy = self._first_copy, None
        return first or (self.images and self.images.reloaded())

    def not_ready_reason(self) -> str:
        """Why nothing is served yet: still loading, or the load failed and why (a failed load
        is not retried by itself: the service waits for a fix and a reload)."""
        if self.last_error is None:
            return "the index and the encoder are loading"
        return (
            f"loading the index and the encoder failed: {self.last_error}; fix it, then reload "
            "(POST /admin/reload or SIGHUP)"
        )

    @property
    def loads_ok(self) -> int:
        """Loads that switched the served version (each one's generation)."""
        return self._generation

    def load_in_background(self) -> threading.Thread:
        """The first load, off the event loop, so /healthz answers while a large index loads."""

        def first_load() -> None:
            with contextlib.suppress(Exception):  # kept in last_error; /readyz reports it
                self.reload()

        thread = threading.Thread(target=first_load, name="shdh-serve-load", daemon=True)
        thread.start()
        return thread
