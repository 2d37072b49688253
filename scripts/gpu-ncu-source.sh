#!/bin/bash
# gpu-ncu-source.sh OUT [BUILD] [QUANT...] - where one atlas_decode_fused
# launch (Qwen3-8B shape, batch 1; default w4a16) spends its warps'
# cycles: Nsight Compute's warp-state and instruction sections, and the
# per-instruction SASS table with its stall samples as CSV
# (OUT/sass-QUANT.csv; sort it by the sample columns).
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1
. "$(dirname "$0")/gpu-prelude.sh"
shift 2 2>/dev/null
export ATLAS_HOME="$out/home"
b=$build/atlas-bench
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 0; }
for q in "${@:-w4a16}"; do
	qa=(--quant "$q")
	[ "$q" = bf16 ] && qa=()
	ATLAS_CUDA_FUSED_QUANT=1 timeout 300 "$ncu" --kernel-name atlas_decode_fused --launch-count 1 \
		--section WarpStateStats --section InstructionStats --section SourceCounters \
		-f -o "$out/rep-$q" "$b" decode --synthetic qwen3-8b "${qa[@]}" --batch 1 --prompt 64 \
		--gen 2 >"$out/ncu-$q.log" 2>&1
	echo "== $q: exit $?"
	"$ncu" -i "$out/rep-$q.ncu-rep" --page details >"$out/details-$q.txt" 2>&1
	grep -E "Executed Instructions|Stall|stall|Cycles Per" "$out/details-$q.txt" | head -30
	"$ncu" -i "$out/rep-$q.ncu-rep" --page source --csv --print-source sass >"$out/sass-$q.csv" 2>&1
	echo "sass rows: $(wc -l <"$out/sass-$q.csv")"
	rm -f "$out/rep-$q.ncu-rep"
done
