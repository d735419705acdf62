#!/usr/bin/env bash
# How many processes under one MPS daemon can each create a CUDA context on GPU 0 (through
# torch, as a server's workers do), for CUDA_DEVICE_MAX_CONNECTIONS=8 and 32 and 2 to 8
# processes. Starts and stops its own MPS daemon. Prints one line per setting; each process's
# output goes to $OUT (default: a temporary directory).
# Usage: bash bench/device/mps_contexts.sh   (on a GPU machine with torch)
set -u
OUT=${OUT:-$(mktemp -d)}
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/mps} CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/mpslog}
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
for conn in 8 32; do
    for n in 2 3 4 6 8; do
        for i in $(seq 1 "$n"); do
            CUDA_DEVICE_MAX_CONNECTIONS=$conn timeout 60 python3 -c "import torch, time; torch.cuda.set_device(0); x = torch.ones(1 << 20, device='cuda'); torch.cuda.synchronize(); time.sleep(3); print('ok')" >"$OUT/mps-$conn-$n-$i.txt" 2>&1 &
        done
        wait
        ok=$(grep -l '^ok' "$OUT"/mps-"$conn"-"$n"-*.txt | wc -l)
        echo "CUDA_DEVICE_MAX_CONNECTIONS=$conn, $n processes: $ok of $n made a context"
        grep -h -i 'error' "$OUT"/mps-"$conn"-"$n"-*.txt | sort | uniq -c | head -2
    done
done
echo quit | nvidia-cuda-mps-control
