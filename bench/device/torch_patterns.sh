#!/bin/bash
# torch.distributed patterns through the drop-in (bench/dropin/torch_patterns.py) on one GPU:
# every rank a process on cuda:0 under MPS (its own daemon), TPCOMM_STANDALONE=1, at worlds
# 2, 3 and 4, each under `timeout`. About 6.5 minutes at most. Results under $OUT:
# patterns-W.txt (a line per pattern, the summary), patterns-W.json, patterns-W.json.logs/
# (each rank's output), mps.txt.
# Usage: D=DIR OUT=DIR bash bench/device/torch_patterns.sh   (DIR holds libtpcomm_nccl.so)
# Knobs: WORLDS="2 3 4"; LARGE=8388608 (the large count); LARGE_DTYPES=bf16,fp32,int32 (only
# these types get it, the others stop at 262147; empty: every type); T2 T3 T4 (seconds a world
# may take, default 105 120 135).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
D=${D:?D=folder with libtpcomm_nccl.so}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
cat "$D/BUILD.txt" 2>/dev/null
LIB=$D/libtpcomm_nccl.so
[ -f "$LIB" ] || { echo "no $LIB"; exit 2; }
WORLDS=${WORLDS:-2 3 4}
LARGE=${LARGE:-8388608}
LARGE_DTYPES=${LARGE_DTYPES-bf16,fp32,int32}
T2=${T2:-105} T3=${T3:-120} T4=${T4:-135}
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog
nvidia-cuda-mps-control -d > "$OUT/mps.txt" 2>&1
echo "MPS daemon: rc=$?" | tee -a "$OUT/mps.txt"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>/dev/null
rc_all=0
for W in $WORLDS; do
    eval T=\${T$W:-120}
    echo "== world $W (limit $T s)"
    # The script's own --timeout ends its runs and still writes the JSON; `timeout` is the
    # backstop 10 s later.
    timeout -k 5 $((T + 10)) stdbuf -oL -eL python3 -u bench/dropin/torch_patterns.py --lib "$LIB" \
        --world "$W" --standalone --timeout "$T" --pattern-timeout 40 --collective-timeout 30 \
        --init-timeout 45 --large "$LARGE" ${LARGE_DTYPES:+--large-dtypes "$LARGE_DTYPES"} \
        --out "$OUT/patterns-$W.json" > "$OUT/patterns-$W.txt" 2>&1
    rc=$?
    echo "world $W rc=$rc" >> "$OUT/patterns-$W.txt"
    [ $rc -eq 0 ] || rc_all=1
    grep -E "^(FAIL|ERROR|HANG) " "$OUT/patterns-$W.txt" | cut -c1-300 | head -25
    grep -E "^(summary|baseline|== run)" "$OUT/patterns-$W.txt"
    echo "world $W rc=$rc"
done
echo quit | nvidia-cuda-mps-control
sleep 1
tail -5 /tmp/mpslog/control.log 2>/dev/null >> "$OUT/mps.txt"
echo "all worlds rc=$rc_all"
exit $rc_all
