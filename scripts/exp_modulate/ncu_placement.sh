#!/usr/bin/env bash
# H200 experiment (2026-12-02): hardware counters of rms_norm and rms_norm_modulate in several buffer placements
# (harness_shared_x.py's "prof" ranges): L1 hits of the loads, L2 traffic and its spread over slices, L2 fabric
# traffic, DRAM bytes and their spread over channels. Metrics this ncu does not know are dropped (listed in the log).
# Usage on the GPU machine, repo root, after `hubkernels build`: OUT=/tmp/o bash scripts/exp_modulate/ncu_placement.sh [N]
set -uo pipefail
OUT=${OUT:-/tmp/hubkernels-ncu}; mkdir -p "$OUT"
want="gpu__time_duration.sum dram__bytes_read.sum dram__bytes_write.sum dram__sectors_read.max dram__sectors_read.avg
dram__sectors_write.max dram__sectors_write.avg lts__t_sectors.max lts__t_sectors.avg lts__t_sectors.min
lts__t_sectors_srcunit_tex_op_read.sum lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
lts__t_sectors_srcunit_ltcfabric.sum lts__t_sectors_srcunit_ltcfabric.max
l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum
l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum lts__t_sectors_op_write.sum
sm__warps_active.avg.pct_of_peak_sustained_active smsp__cycles_active.avg dram__throughput.avg.pct_of_peak_sustained_elapsed"
ncu --query-metrics --chip gh100 > "$OUT/ncu_metrics.txt" 2>&1
ok=""
for m in $want; do
  base=${m%%.*}
  if grep -q "^$base " "$OUT/ncu_metrics.txt"; then ok="$ok${ok:+,}$m"; else echo "ncu: dropped $m" >&2; fi
done
[ -n "$ok" ] || ok=$(echo $want | tr " " ",")  # the query listing looked different: try them all
echo "metrics: $ok"
ncu --clock-control none --nvtx --nvtx-include "prof/" --metrics "$ok" --csv \
  python3 scripts/exp_modulate/harness_shared_x.py "${1:-6}" > "$OUT/ncu_placement.csv" 2> "$OUT/ncu_placement.err"
echo "ncu exit $?"; grep -v '^"' "$OUT/ncu_placement.csv" | tail -12; tail -5 "$OUT/ncu_placement.err"
