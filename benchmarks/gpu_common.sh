# What both GPU session scripts (gpu_session.sh, gpu_photos_session.sh) need, sourced by them:
# the Python that holds PyTorch there, src/ on the path (the machine has no install of the
# project), a log of the phases, the machine's description, and CUDA MPS, which lets several
# fit processes' kernels run on the card at the same time instead of taking turns.
# Expects $run (the session's folder) and $device (cuda or cpu).
py=$(command -v python3 || command -v python)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

phase() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$run/session.log"; }

describe_machine() {
  phase "machine"
  { nvidia-smi -L 2>&1 || true; "$py" -c 'import torch, numpy; print("torch", torch.__version__,
"cuda", torch.version.cuda, "numpy", numpy.__version__)'; nproc; } | tee -a "$run/session.log"
}

# start_mps: MPS on where the machine allows it (MPS=0 leaves it off); mps=1 when it is on.
start_mps() {
  mps=0
  if [ "${MPS:-1}" = 1 ] && [ "$device" = cuda ] && command -v nvidia-cuda-mps-control >/dev/null
  then
    export CUDA_MPS_PIPE_DIRECTORY=$run/mps-pipe CUDA_MPS_LOG_DIRECTORY=$run/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d && timeout 60 "$py" -c 'import torch; torch.ones(1, device="cuda")'
    then
      mps=1
    else
      echo quit | nvidia-cuda-mps-control 2>/dev/null
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
  fi
  phase "MPS: $([ $mps = 1 ] && echo on || echo off)"
}

stop_mps() {
  [ "$mps" = 1 ] && { echo quit | nvidia-cuda-mps-control; }
  rm -rf "$run"/mps-pipe
}

# wait_streams PID...: wait for each fit process, log its exit code; cut_off=1 if any failed or
# was stopped by its deadline.
wait_streams() {
  cut_off=0
  local pid rc
  for pid in "$@"; do
    wait "$pid"
    rc=$?
    echo "stream $pid rc $rc" >>"$run/session.log"
    [ "$rc" = 0 ] || cut_off=1
  done
}

# summarise_fits FOLDER: one line per fit record in FOLDER: epochs, seconds, validation curve.
summarise_fits() {
  "$py" - "$1" <<'PY' | tee -a "$run/session.log"
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).rglob("fits/*.json")):
    r = json.loads(path.read_text())
    h = r["history"]
    val = [e.get("val_ndcg_at_100") for e in h]
    print(f"{path.parent.parent.name}/{path.stem}: {len(h)} epochs, {r['fit_seconds']:.0f} s, "
          f"val NDCG@100 {' '.join(f'{v:.3f}' for v in val if v is not None)}")
PY
}
