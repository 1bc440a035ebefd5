#!/bin/bash
# Small messages with the vCPUs kept out of their halt state (PM QoS: /dev/cpu_dma_latency
# held at 0 µs, so cpuidle only polls) against the default, interleaved rounds.
# (Run from /tmp/idle as written; it writes into this directory.)
# The request is process-scoped: it ends when the holder exits.
cd /work/main
export GRIDSPLIT_LAB_PREFIX=gsx
D=results/bench/2026-11-23-relay-latency
hold() {
  python3 -c "import os,struct,signal; fd=os.open('/dev/cpu_dma_latency',os.O_WRONLY); os.write(fd,struct.pack('i',0)); signal.pause()" &
  HOLDER=$!
  sleep 0.5
}
for k in 1 2 3; do
  for v in default poll; do
    [ $v = poll ] && hold
    grep -H . /sys/devices/system/cpu/cpu*/cpuidle/state1/usage > $D/idle-usage-$v-$k-before.txt
    gridsplit bench pingpong --topology paper --sizes 8,1K --impl openmpi --repeat $k --no-report --out $D/pingpong-$v.jsonl
    gridsplit bench gather --topology paper --nodes 4,12,20 --sizes 1K --impl openmpi --repeat $k --no-report --out $D/gather-$v.jsonl
    grep -H . /sys/devices/system/cpu/cpu*/cpuidle/state1/usage > $D/idle-usage-$v-$k-after.txt
    if [ $v = poll ]; then kill $HOLDER; wait $HOLDER 2>/dev/null; fi
  done
done
echo IDLEDONE
