#!/bin/bash
# gpu-draft2.sh BUILD - one device call after the fused-kernel fix: the
# draft model's fused parts (scripts/gpu-draft.sh PARTS="fused shapes",
# MODES=nbi), then the hybrid goldens (scripts/gen-hybrid-golden.py),
# packed so that at most 8 files come back: $OUT/draft-summary.txt,
# draft-files.tgz, hybrid.tgz.
B=${1:-build-gs}
PARTS="fused shapes" MODES=nbi bash scripts/gpu-draft.sh "$B" >"$OUT/draft-summary.txt" 2>&1
mkdir -p /tmp/hy
HYBRID_SOURCES=${HYBRID_SOURCES:-1} timeout 240 python3 scripts/gen-hybrid-golden.py /tmp/hy >/tmp/hy/hy.log 2>&1
echo "gen-hybrid-golden: exit $?" >>/tmp/hy/hy.log
tar czf "$OUT/hybrid.tgz" -C /tmp/hy .
cd "$OUT" || exit 1
keep='^(hybrid.tgz|draft-summary.txt|draft-files.tgz)$'
files=$(ls | grep -Ev "$keep")
[ -n "$files" ] && tar czf draft-files.tgz $files && rm -f $files
cat draft-summary.txt
grep -E '^(FAILED|done|qwen3|  qwen3.*config|gen-hybrid)|Error|error' /tmp/hy/hy.log | head -30
