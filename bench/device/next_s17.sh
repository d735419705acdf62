#!/usr/bin/env bash
# Session 17: the command's GPU bench at this commit (staged by hand:
# cargo build --release -p tpcomm-cli; strip into .dev/cli17), two checks:
#   c  `tpcomm bench --device gpu --algos one-shot,int8,fp8/128` over the host
#      path, 2 ranks sharing GPU 0: the quantized rows the front end refused
#      before 9de459d, now run end to end (the command docs/quantized.md gives);
#   d  the kernels launched with programmatic dependent launch (one-shot-pdl,
#      two-shot-pdl) back to back with 2 and 4 ranks sharing GPU 0 over P2P:
#      whether a call's blocks starting early on the shared GPU can starve the
#      other ranks' blocks of the call before (a bounded wait would end it in
#      an error naming the peer; a row means every call completed and was
#      checked).
# device: O=$OUT STEPS=c,d bash bench/device/next_s17.sh, carry [".dev/cli17"]
O=${O:-${OUT:-/tmp/next-s17}}
STEPS=${STEPS:-c,d}
. "$(dirname "$0")/common.sh"
C=.dev/cli17/tpcomm
echo "$C: $(head -1 .dev/cli17/BUILD.txt)" >> "$O/log.txt"
if on c; then
  run cli-quant 120 $C bench --device gpu --launch threads --ranks 2 --transport host \
    --algos one-shot,int8,fp8/128 --min 1MiB --max 16MiB --modes graph
fi
if on d; then
  for r in 2 4; do
    run pdl-$r 150 $C bench --device gpu --launch threads --ranks $r --transport cuda \
      --algos one-shot,one-shot-pdl,two-shot,two-shot-pdl --min 4KiB --max 4MiB
  done
fi
pack
