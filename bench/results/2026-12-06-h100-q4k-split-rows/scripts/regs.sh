#!/usr/bin/env bash
# regs.sh TREE CHUNK,BLOCK_N,WARPS: aot_int16x.py on TREE's kvspill (Triton 3.6 from /tmp/t36), then
# ptxas for sm_90a: registers, stack, SASS instructions and global loads (what calls 7-8 compared).
# regs.sh TREE CHUNK,BLOCK_N,WARPS two: the TWO form (aot_int16x.py two).
# regs.sh TREE T_PAD,BLOCK_N,WARPS,STAGES,SPLIT_K,TWO_ACC words: the same for aot_words.py.
set -eu
D=$(dirname "$0"); out=/tmp/regs_$(basename $1)_${2//,/_}
# -S and site-packages last: an editable install of kvspill would otherwise win over TREE
SP=$(python3 -c 'import site; print(site.getsitepackages()[0])')
AOT=aot_int16x.py; [ "${3:-}" = words ] && AOT=aot_words.py
PYTHONPATH=/tmp/t36:$1:$SP python3 -S "$D/$AOT" $2 $out ${3:-} 2>/dev/null | tail -1
BIN=/tmp/t36/triton/backends/nvidia/bin
$BIN/ptxas -arch=sm_90a -O3 $out.ptx -o $out.cubin
$BIN/cuobjdump -sass $out.cubin 2>/dev/null > $out.sass
echo "$(basename $1) $2 $($BIN/cuobjdump -res-usage $out.cubin 2>/dev/null | grep -o 'REG:[0-9]* STACK:[0-9]*')" \
  "instructions $(grep -cE '^\s+/\*[0-9a-f]{4,5}\*/' $out.sass) $(grep -oE '(LDG|LDGSTS|STS|LDSM)[A-Z0-9_.]*' $out.sass | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"
