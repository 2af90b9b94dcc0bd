# Sourced after the prelude (T0, OUT, L set). `prof` as in ../../2026-12-06-h100-gated-down/scripts/prof.sh,
# with PYTHONSAFEPATH=1: `python3 -m` from the repository root puts the working directory first on
# sys.path, so a tree copy named by PYTHONPATH was shadowed by the checkout's kvspill in every
# engine A/B of that script (found 2026-12-06 11:30 UTC; README of this folder). `which_tree NAME
# ENV...` logs the kvspill file a run with those variables imports.
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
prof() {
  local name=$1 lim=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 100 env PYTHONSAFEPATH=1 "${envs[@]}" python3 -m kvspill.bench.profile_decode "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
which_tree() {
  local name=$1; shift
  echo "$name imports $(env PYTHONSAFEPATH=1 "$@" python3 -c 'import kvspill; print(kvspill.__file__)')" | tee -a $L
}
