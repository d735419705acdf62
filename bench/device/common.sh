# Shared by the device scripts (scale.sh); sourced, not run.
# Before sourcing set O (the output folder) and STEPS (comma list); D (the
# staged binaries, default .dev/all) may be set. Gives: the environment every
# device call needs, T (the staged tpcomm), on STEP, run NAME LIMIT CMD...,
# pack (everything in O but log.txt into O/outputs.tgz: a call returns at most
# 8 files), mps_on / mps_off (the MPS daemon, so ranks in processes sharing a
# GPU run at once).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TPCOMM_CACHE_DIR=/tmp/tpcomm-cache
D=${D:-.dev/all}
T=$D/tpcomm
mkdir -p "$O"
on() { [[ ",$STEPS," == *",$1,"* ]]; }
# run NAME LIMIT CMD...: CMD under `timeout LIMIT`, output in $O/NAME.txt,
# its exit status and key lines in $O/log.txt.
run() {
  local n=$1 l=$2; shift 2
  echo "== $n ($(date -u +%T)): $*" | tee -a "$O/log.txt"
  timeout "$l" "$@" > "$O/$n.txt" 2>&1
  echo "   rc=$?" | tee -a "$O/log.txt"
  grep -E "test result|wrong|^test .* \.\.\. |FAILED|panicked|error" "$O/$n.txt" | tail -12 | tee -a "$O/log.txt"
}
pack() {
  echo "== done $(date -u +%T)" | tee -a "$O/log.txt"
  local tgz
  tgz=$(mktemp /tmp/device-outputs.XXXXXX)
  tar czf "$tgz" -C "$O" --exclude log.txt . &&
    find "$O" -maxdepth 1 -type f ! -name log.txt -delete && mv "$tgz" "$O/outputs.tgz"
}
mps_on() {
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
  mkdir -p /tmp/mps /tmp/mpslog
  nvidia-cuda-mps-control -d && echo "MPS daemon started" | tee -a "$O/log.txt"
}
mps_off() {
  echo quit | nvidia-cuda-mps-control
  sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
