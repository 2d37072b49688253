#!/bin/bash
# gpu-moe-fused.sh OUT [BUILD] - the fused one-token decode on MoE models
# (ATLAS_CUDA_FUSED_MOE=1), on a GPU machine with binaries carried from a
# build machine (scripts/gpu-carry.sh):
#   fused-test.log        test-fused-decode's MoE shapes (Qwen3-30B-A3B 4
#                         layers, Mixtral 2 layers): fused = op by op
#   a3b-{fused,op}.*      atlas-bench decode, Qwen3-30B-A3B shape, batch 1,
#                         fused and op by op, in the same call
#   mixtral-{fused,op}.*  the same for Mixtral-8x7B
#   dense.*               Qwen3-8B batch 1 (the dense fused step: the MoE
#                         branch must not slow it)
#   summary.md            one line per part
# PARTS="test a3b mixtral dense" picks parts (default: all).
set -u
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1 # atlas-bench makes its own models
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_SRC="$src"
parts=${PARTS:-test a3b mixtral dense}
summary="$out/summary.md"
echo "| part | result | detail |" >"$summary"
echo "|---|---|---|" >>"$summary"
row() { echo "| $1 | $2 | $3 |" >>"$summary"; }
has() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1

if has test; then
	HARNESS_ONLY=layers timeout 300 "$build/tests/gpu/test-fused-decode" >"$out/fused-test.log" 2>&1
	rc=$?
	row "test-fused-decode (MoE shapes)" "$([ $rc -eq 0 ] && echo pass || echo FAIL)" \
		"exit $rc; $(grep -c '^ok' "$out/fused-test.log") ok, $(grep -c '^not ok' "$out/fused-test.log") not ok; $(grep '# overall' "$out/fused-test.log")"
fi

bench() { # NAME ENV ARGS...: one atlas-bench run to NAME.json and NAME.txt
	local name=$1 envv=$2
	shift 2
	env $envv timeout 300 "$build/atlas-bench" "$@" --json >"$out/$name.json" 2>"$out/$name.txt"
	local rc=$?
	row "atlas-bench $name ($envv)" "$([ $rc -eq 0 ] && echo ran || echo FAIL)" \
		"exit $rc: $(grep -E '^ *[0-9]+ ' "$out/$name.txt" | tr -s ' ' | tr '\n' ';' | cut -c1-300)"
}
if has a3b; then
	bench a3b-fused ATLAS_CUDA_FUSED_MOE=1 decode --synthetic qwen3-30b-a3b --batch 1 --prompt 512 --gen 128
	bench a3b-op ATLAS_CUDA_FUSED_MOE=0 decode --synthetic qwen3-30b-a3b --batch 1 --prompt 512 --gen 128
fi
if has mixtral; then
	bench mixtral-fused ATLAS_CUDA_FUSED_MOE=1 decode --synthetic mixtral-8x7b --batch 1 --prompt 512 --gen 64
	bench mixtral-op ATLAS_CUDA_FUSED_MOE=0 decode --synthetic mixtral-8x7b --batch 1 --prompt 512 --gen 64
fi
if has dense; then
	bench dense ATLAS_CUDA_FUSED_MOE=1 decode --synthetic qwen3-8b --batch 1 --prompt 512 --gen 128
fi
cat "$summary"
