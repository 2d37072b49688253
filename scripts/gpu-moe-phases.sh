#!/bin/bash
# gpu-moe-phases.sh OUT [BUILD] - where the fused MoE decode step's time
# goes, on a GPU machine with binaries carried from a build machine
# (scripts/gpu-carry.sh). atlas-bench decode, Qwen3-30B-A3B shape, batch 1,
# once a mode of the timing switch ATLAS_CUDA_FUSED_MODE (0 normal, 1 no
# attention, 2 no grid barriers, 3 weights only: no arithmetic), then the
# variants in $VARIANTS ("NAME:ENV=V,..." words, each its own run; with
# BENCH=NAME the carried binary NAME instead of atlas-bench, SHAPE=S
# another shape), then the checks PARTS names. Files:
#   phases.txt   one line a run: ms a step, tok/s, the floor and the share of it
#   runs.txt     every run's table (atlas-bench's stderr)
#   inv.log      test-invariance (PARTS=... inv)
#   test.log     test-fused-decode's MoE shapes (PARTS=... test)
#   ops.log      test-cuda-ops' moe cases: routing against the CPU (ops)
#   summary.md   one line per part (of every call into OUT)
# PARTS="modes variants inv test ops report" picks parts (default: modes
# inv); report prints phases.txt and every phase trace in runs.txt, so
# that several calls into one OUT end with one report.
set -u
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_SRC="$src"
parts=${PARTS:-modes inv}
gen=${GEN:-64}
summary="$out/summary.md"
if [ ! -f "$summary" ]; then # (several calls into one OUT share it)
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$summary" 2>&1
	echo "| part | result | detail |" >>"$summary"
	echo "|---|---|---|" >>"$summary"
fi
row() { echo "| $1 | $2 | $3 |" >>"$summary"; }
has() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }

one() { # NAME ENV...: one batch-1 decode run
	local name=$1
	shift
	echo "== $name ($*)" >>"$out/runs.txt"
	env "$@" timeout 300 "$build/${BENCH:-atlas-bench}" decode --synthetic "${SHAPE:-qwen3-30b-a3b}" \
		--batch 1 --prompt 512 --gen "$gen" --json >"$out/run.json" 2>>"$out/runs.txt"
	local rc=$?
	python3 - "$name" "$rc" "$out/run.json" >>"$out/phases.txt" <<'PY'
import json, sys
name, rc, path = sys.argv[1:4]
try:
    j = json.load(open(path))
    r = j["results"][0] if "results" in j else j
    print(name, "rc", rc, "ms %.4f tok/s %.1f floor_ms %.4f roofline %.4f" % (
        r["ms_per_step"], r["tok_s"], r.get("floor_ms", 0), r.get("roofline", 0)))
except Exception as e:
    print(name, "rc", rc, "no json:", e)
PY
}
if has modes; then
	for md in 0 1 2 3; do
		one "mode$md" ATLAS_CUDA_FUSED_MODE=$md
	done
	one op ATLAS_CUDA_FUSED_MOE=0
	row modes ran "$(wc -l <"$out/phases.txt") runs"
fi
if has variants; then
	for v in ${VARIANTS:-}; do
		one "${v%%:*}" $(echo "${v#*:}" | tr ',' ' ')
	done
	row variants ran "${VARIANTS:-}"
fi
rm -f "$out/run.json"
if has inv; then
	ATLAS_TEST_DEVICE=cuda timeout 400 "$build/tests/test-invariance" >"$out/inv.log" 2>&1
	rc=$?
	row "test-invariance on CUDA" "$([ $rc -eq 0 ] && echo pass || echo FAIL)" \
		"exit $rc; $(grep -c '^ok' "$out/inv.log") ok, $(grep -c '^not ok' "$out/inv.log") not ok"
fi
if has test; then
	HARNESS_ONLY=layers timeout 300 "$build/tests/gpu/test-fused-decode" >"$out/test.log" 2>&1
	rc=$?
	row "test-fused-decode (MoE shapes)" "$([ $rc -eq 0 ] && echo pass || echo FAIL)" \
		"exit $rc; $(grep -c '^ok' "$out/test.log") ok, $(grep -c '^not ok' "$out/test.log") not ok; $(grep '# overall' "$out/test.log")"
fi
if has ops; then
	HARNESS_ONLY=moe timeout 300 "$build/tests/gpu/test-cuda-ops" >"$out/ops.log" 2>&1
	rc=$?
	row "test-cuda-ops (moe)" "$([ $rc -eq 0 ] && ! grep -q ' FAIL$' "$out/ops.log" && echo pass || echo FAIL)" \
		"exit $rc; $(grep -c ' FAIL$' "$out/ops.log") failed"
fi
cat "$summary"
if has report; then
	cat "$out/phases.txt"
	awk '/^== /{n=$2} /fused decode trace/{p=1; print "## " n} /^== /{p=0} p' "$out/runs.txt"
fi
