# Sourced by benchmarks/gpu_*.sh: part NAME TIMEOUT CMD... runs CMD under timeout into $O/NAME.log and appends
# "NAME rc=N Ss" to $O/status.txt (every part runs; none stops the script).
part() {
  local name=$1 t=$2; shift 2
  local t0=$SECONDS
  timeout "$t" "$@" > "$O/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$O/status.txt"
  tail -5 "$O/$name.log"
}
