#!/usr/bin/env bash
# One call on a lent GPU machine: the loop-vs-bare-step benchmark, then the deep fits of the
# `gpu` profile from a bundle, then the compiled benchmark, packed into one archive.
#
#   bash benchmarks/gpu_session.sh BUNDLE OUT_DIR [FIT_SECONDS]
#
# The machine has torch, numpy and numba but not the project's install, so everything runs from
# src/ on PYTHONPATH. Device time is scarce and a call is cut off at its limit, so every phase has
# its own deadline, the most important fits come first (64 bits, seeds 0-2) and the archive is
# written whatever finished: a fit cut off by its deadline leaves no codes file, only a checkpoint
# that is not packed. The three methods train side by side, one process each: at batch 128 one
# fit uses a fraction of the card (about 1 GiB, and the step is launch-bound), so three streams
# finish the 64-bit fits in about the time of one stream's. Their images/s are therefore shared
# figures; the benchmark runs alone, before them, for the loop's own speed.
#
# DEVICE=cpu QUICK=1 checks the script on a machine without a GPU (tiny benchmark, and the fits
# are cut off by FIT_SECONDS).
set -u
bundle=${1:?usage: gpu_session.sh BUNDLE OUT_DIR [FIT_SECONDS]}
out=${2:?usage: gpu_session.sh BUNDLE OUT_DIR [FIT_SECONDS]}
fit_seconds=${3:-330}
device=${DEVICE:-cuda}
py=$(command -v python3 || command -v python)
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
run=$(mktemp -d)/gpu-session
mkdir -p "$run" "$out"
quick=()
[ "${QUICK:-0}" = 1 ] && quick=(--quick)

phase() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$run/session.log"; }

phase "machine"
{ nvidia-smi -L 2>&1 || true; "$py" -c 'import torch, numpy; print("torch", torch.__version__,
"cuda", torch.version.cuda, "numpy", numpy.__version__)'; } | tee -a "$run/session.log"

phase "benchmark: loop vs bare step, batch 128"
timeout 120 "$py" benchmarks/gpu_epoch.py --device "$device" "${quick[@]}" \
  >"$run/gpu_epoch-b128.txt" 2>&1
echo "rc $?" >>"$run/gpu_epoch-b128.txt"
tail -n 12 "$run/gpu_epoch-b128.txt" | tee -a "$run/session.log"

phase "fits: shdh, dpsh, oracle side by side; 64 bits first, seeds 0-2 (deadline ${fit_seconds}s)"
pids=()
for method in shdh dpsh oracle; do
  timeout "$fit_seconds" "$py" -m shdh.bundle train "$bundle" --out "$run/fits-$method" \
    --work-dir "$run/work-$method" --methods "$method" --bits 64 32 48 --seeds 0 1 2 \
    --device "$device" --no-progress >"$run/fits-$method.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; echo "stream $pid rc $?" >>"$run/session.log"; done
ls "$run"/fits-*/codes 2>/dev/null | tee -a "$run/session.log"

phase "benchmark: batch 512, torch.compile"
timeout 90 "$py" benchmarks/gpu_epoch.py --device "$device" --batch 512 --compile "${quick[@]}" \
  >"$run/gpu_epoch-b512-compile.txt" 2>&1
echo "rc $?" >>"$run/gpu_epoch-b512-compile.txt"
tail -n 8 "$run/gpu_epoch-b512-compile.txt" | tee -a "$run/session.log"

phase "pack"
rm -rf "$run"/work-*
tar czf "$out/gpu-session.tar.gz" -C "$(dirname "$run")" gpu-session
ls -la "$out"
