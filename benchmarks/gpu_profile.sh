#!/usr/bin/env bash
# One device call: Nsight Compute on one launch of the Gluon and the Triton MLA kernel (128 and 64 heads).
# usage: OUT=dir benchmarks/gpu_profile.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-/tmp/dcpctl-profile}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
[ -n "$NCU" ] || { echo "no Nsight Compute (ncu) on this machine"; exit 1; }
prof() {  # name, heads, config
  timeout 240 "$NCU" --kernel-name regex:_mla --launch-skip 3 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section LaunchStats --section Occupancy \
    python3 benchmarks/profile_mla.py --heads "$2" --ctx 32768 --batch 64 --config "$3" > "$OUT/$1.txt" 2>&1
  echo "== $1 rc=$?"; grep -E "Duration|Throughput|Stall|Issue Slots|Eligible|Active Warps|Registers|Shared Memory Config|No Eligible|Warp Cycles" "$OUT/$1.txt" | head -40
}
prof gluon128 128 64,64,8,2,1,0,0,0,1
prof triton128 128 64,64,8,2,1,1
prof gluon64 64 64,64,8,2,1,0,0,0,1
stalls() {  # name, heads, config: stall reasons per issued instruction, tensor pipe and shared-memory use
  timeout 240 "$NCU" --kernel-name regex:_mla --launch-skip 3 --launch-count 1 \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active,regex:l1tex__data_bank_conflicts_pipe_lsu_mem_shared.*\.sum,regex:l1tex__data_pipe_lsu_wavefronts_mem_shared\.sum,sm__cycles_elapsed.avg" \
    python3 benchmarks/profile_mla.py --heads "$2" --ctx 32768 --batch 64 --config "$3" > "$OUT/$1_stalls.txt" 2>&1
  echo "== $1 stalls rc=$?"; grep -E "ratio|pct|sum|cycles_elapsed" "$OUT/$1_stalls.txt" | awk '$NF+0 > 0.05 || /pct|sum|elapsed/' | head -40
}
stalls gluon128 128 64,64,8,2,1,0,0,0,1
stalls triton128 128 64,64,8,2,1,1
