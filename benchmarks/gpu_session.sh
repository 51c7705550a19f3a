#!/usr/bin/env bash
# One call on a lent GPU machine: the converged protocol of the `gpu` profile and its benchmarks,
# packed into one archive.
#
#   bash benchmarks/gpu_session.sh BUNDLE OUT_DIR [SESSION_SECONDS]
#
# The machine has torch, numpy and numba but not the project's install, so everything runs from
# src/ on PYTHONPATH. Device time is scarce and a call is cut off at its limit, so every phase
# has its own deadline and the archive is written whatever finished: the fits get what is left
# of SESSION_SECONDS (default 540, for a 600-second call) after the checks, less 25 s to pack.
# Phases:
# 0. the tests that need a CUDA device (the CUDA-graph step, default and fused SGD; the resident
#    and pinned training data paths), with the machine's pytest: they import only the core;
# 1. the CUDA-graph check (benchmarks/gpu_graph_check.py) for every method of the session: each
#    one's eager fit and graphed one with fused SGD (the gpu profile's) must agree, else that
#    method's fits train with eager steps and torch's default SGD (--no-cuda-graph
#    --no-fused-sgd), and every method's do if the check itself fails;
# 2. the loop benchmark with a profiler trace (benchmarks/gpu_epoch.py --trace; BENCH=0 skips it);
# 3. the deep fits from the bundle, under the bundle's convergence rule (profiles/gpu.yaml): one
#    process per (method, seed), side by side, each doing 64 bits first, then 32 and 48 (nine
#    for the paper's methods and seeds). At batch 128 one fit uses a small part of the card;
#    where the machine allows it, CUDA MPS lets the processes' kernels run at the same time
#    instead of taking turns. A fit cut off by the deadline leaves no codes file, and its
#    checkpoints stay in RUN_DIR: rerun the script with the same RUN_DIR (CHECKS=0 skips phases
#    0-2) on the same machine, and the finished fits are kept while the others resume from their
#    checkpoints (two calls on a warm machine).
# 4. pack: every fit's codes and record in one folder (gpu-session/gpu-run/, for `shdh evaluate
#    --codes-from` or benchmarks/fits_table.py), in OUT/gpu-run-BITS.tar.gz, and the logs, the
#    benchmark output and the trace in OUT/gpu-session.tar.gz.
#
# What runs: METHODS (default "oracle shdh dpsh", the paper's protocol) with SEEDS (default "0 1
# 2"); the classifier oracle is one process whatever STREAMS says, since its other lengths
# continue its 64-bit training. Every deep method of the catalogue, one seed first (docs/gpu.md):
#   METHODS="dsh hashnet dch dtsh greedyhash csq orthohash hpdh dpsh+h hashnet+h" SEEDS=0 \
#   BENCH=0 CHECK_N_TRAIN=2560 bash benchmarks/gpu_session.sh BUNDLE OUT 570
# STREAMS=fit runs one process per fit instead of one per method and seed: the card's work is
# then shared by every fit left, not by the streams whose earlier lengths are done; but a
# deadline then cuts every fit off at once, where one stream per method has its 64 bits done.
# SET="KEY=VALUE ..." passes each word as `--set KEY=VALUE` to the fits (train settings, as
# `shdh.bundle train --set` takes them).
#
# DEVICE=cpu QUICK=1 checks the script on a machine without a GPU (tiny benchmark and check; the
# fits are cut off by the deadline unless SET makes them small, e.g. SET="train.n_train=256
# train.width=0.125 train.epochs=1 train.val_size=0"). MPS=0 leaves MPS off; FITS=0 runs the
# check and the benchmark only (BUNDLE is then not read); CHECKS=0 skips phases 0-2 (a rerun on a
# card of the same kind, whose check passed) and trains with the bundle's settings.
set -u
usage="usage: gpu_session.sh BUNDLE OUT_DIR [SESSION_SECONDS]"
bundle=${1:?$usage}
out=${2:?$usage}
session_seconds=${3:-540}
device=${DEVICE:-cuda}
run=${RUN_DIR:-$(mktemp -d)}/gpu-session
mkdir -p "$run" "$out"
source "$(dirname "$0")/gpu_common.sh"
rm -rf "$run/gpu-run" "$run/session.log"
quick=()
methods=${METHODS:-oracle shdh dpsh}
seeds=${SEEDS:-0 1 2}
read -r -a method_list <<<"$methods"
check=(--n-train "${CHECK_N_TRAIN:-6400}")
if [ "${QUICK:-0}" = 1 ]; then
  quick=(--quick)
  check=(--n-train 512 --epochs 2 --width 0.125)
fi
set_args=()
for setting in ${SET:-}; do set_args+=(--set "$setting"); done

streams=${STREAMS:-seed}
describe_machine

eager_methods=" "  # the methods whose fits train with eager steps and default SGD
if [ "${CHECKS:-1}" = 1 ]; then
  phase "the CUDA-only tests"
  timeout 120 "$py" -m pytest -p no:cacheprovider -q -rs tests/unit/test_cuda_graph_step.py \
    tests/unit/test_training_data_path.py >"$run/cuda-tests.txt" 2>&1
  echo "rc $?" >>"$run/cuda-tests.txt"
  grep -E "^(FAILED|ERROR|SKIPPED)|[0-9]+ (passed|failed)|^rc " "$run/cuda-tests.txt" | tail -n 12 \
    | tee -a "$run/session.log"

  phase "CUDA graph check: eager and graphed fits from one seed, per method: $methods"
  (cd benchmarks && timeout $((60 + 20 * ${#method_list[@]})) "$py" gpu_graph_check.py \
    --device "$device" --fused-sgd --methods "${method_list[@]}" "${check[@]}") \
    >"$run/graph-check.txt" 2>&1
  rc=$?
  echo "rc $rc" >>"$run/graph-check.txt"
  grep -E "(AGREE|DIFFER)|^agree:|^log: .*failed|^rc " "$run/graph-check.txt" | tee -a "$run/session.log"
  if [ "$rc" != 0 ]; then
    # The check's last line names the methods that differ; without it (a crash, its timeout)
    # no method's graph is known to be right.
    differ=$(sed -n 's/^agree: .*; differ: //p' "$run/graph-check.txt")
    eager_methods=" ${differ:-$methods} "
    phase "the graphed steps did not agree or failed for:$eager_methods- eager steps for their fits"
  fi

  if [ "${BENCH:-1}" = 1 ]; then
    phase "benchmark: network-only and whole step, graphed variants, the loops, profiler trace"
    (cd benchmarks && timeout 150 "$py" gpu_epoch.py --device "$device" "${quick[@]}" \
      --trace "$run/trace") >"$run/gpu_epoch.txt" 2>&1
    echo "rc $?" >>"$run/gpu_epoch.txt"
    tail -n 40 "$run/gpu_epoch.txt" | tee -a "$run/session.log"
  fi
fi

if [ "${FITS:-1}" = 0 ]; then
  phase "pack (no fits)"
  tar czf "$out/gpu-session.tar.gz" -C "$(dirname "$run")" gpu-session
  ls -la "$out"
  exit 0
fi

start_mps

fit_seconds=$((session_seconds - SECONDS - 25))
phase "fits of $methods, seeds $seeds: one process per $([ "$streams" = fit ] && echo fit \
  || echo "method and seed, 64 bits first") (deadline ${fit_seconds}s)"
pids=()
# fit NAME METHOD SEED BITS...: one process, its codes in fits-NAME, its log in fits-NAME.log.
fit() {
  local name=$1 method=$2 seed=$3 graph_flag=()
  shift 3
  [[ "$eager_methods" == *" $method "* ]] && graph_flag=(--no-cuda-graph --no-fused-sgd)
  OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 timeout "$fit_seconds" "$py" -m shdh.bundle train \
    "$bundle" --out "$run/fits-$name" --work-dir "$run/work-$name" --methods "$method" \
    --bits "$@" --seeds "$seed" --device "$device" --no-progress "${graph_flag[@]}" \
    "${set_args[@]}" \
    >"$run/fits-$name.log" 2>&1 &
  pids+=($!)
}
for seed in $seeds; do
  for method in "${method_list[@]}"; do
    # The oracle's other lengths continue its 64-bit training, so they stay in its process.
    if [ "$streams" = fit ] && [ "$method" != oracle ]; then
      for bits in 64 32 48; do fit "$method-s$seed-b$bits" "$method" "$seed" "$bits"; done
    else
      fit "$method-s$seed" "$method" "$seed" 64 32 48
    fi
  done
done
wait_streams "${pids[@]}"
stop_mps

phase "pack"
mkdir -p "$run/gpu-run/codes" "$run/gpu-run/fits"
for d in "$run"/fits-*/; do
  cp "$d"codes/*.npz "$run/gpu-run/codes/" 2>/dev/null
  cp "$d"fits/*.json "$run/gpu-run/fits/" 2>/dev/null
  [ -f "$run/gpu-run/bundle.json" ] || cp "$d"bundle.json "$run/gpu-run/" 2>/dev/null
done
summarise_fits "$run/gpu-run"
if [ $cut_off = 0 ]; then
  rm -rf "$run"/work-* "$run"/fits-*/
else
  phase "some fits did not finish: their checkpoints stay in $run for a rerun with RUN_DIR"
fi
# One archive per code length (a call brings back files of at most 16 MiB; 27 fits' codes come
# to about 14 MB), unpacked side by side into gpu-session/gpu-run; and the rest.
for bits in 64 32 48; do
  (cd "$(dirname "$run")" && tar czf "$out/gpu-run-$bits.tar.gz" gpu-session/gpu-run/bundle.json \
    $(cd "$(dirname "$run")" && ls gpu-session/gpu-run/codes/*-"$bits"*.npz \
      gpu-session/gpu-run/fits/*-"$bits"*.json 2>/dev/null))
done
tar czf "$out/gpu-session.tar.gz" -C "$(dirname "$run")" --exclude gpu-session/gpu-run \
  --exclude 'gpu-session/work-*' --exclude 'gpu-session/fits-*/*' gpu-session
ls -la "$out"
