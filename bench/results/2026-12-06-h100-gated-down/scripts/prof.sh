# Sourced by calls 29-30 after the prelude (T0, OUT, L set): `left LIMIT` (seconds since T0 under
# LIMIT) and `prof NAME LIMIT [ENV=V ...] -- PROFILE_DECODE_ARGS` (one profile_decode run, skipped
# past LIMIT, its step and plan lines to the log).
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
prof() {
  local name=$1 lim=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 100 env "${envs[@]}" python3 -m kvspill.bench.profile_decode "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
