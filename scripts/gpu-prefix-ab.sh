#!/bin/bash
# gpu-prefix-ab.sh OUT [BUILD] - where the time to first token of a prompt
# whose first 2,000 tokens are cached goes: four prompts sharing a
# 2,000-token prefix with 24 tokens each of their own, one after the
# other (--parallel 1), under A/B settings of the small-T attention and
# GEMM paths, twice each. One block of timing lines per setting in
# OUT/prefix-ab.txt.
set -u
. "$(dirname "$0")/gpu-prelude.sh"
python3 - <<'PY'
import random
r = random.Random(3)
pre = [r.randrange(5, 4000) for _ in range(2000)]
with open("/tmp/prefix4.txt", "w") as f:
    for i in range(4):
        f.write(" ".join(map(str, pre + [r.randrange(5, 4000) for _ in range(24)])) + "\n")
PY
for env in "X=0" "ATLAS_CUDA_FLASH_MIN_T=16" "ATLAS_CUDA_FLASH_MIN_T=1" "ATLAS_CUDA_TC_MIN_T=65" \
	"ATLAS_CUDA_FLASH_MIN_T=16 ATLAS_CUDA_TC_MIN_T=65"; do
	for k in 1 2; do
		echo "--- $env (run $k)" >>"$out/prefix-ab.txt"
		env $env timeout 120 "$build/atlas-run" generate -m "$m" -n 2 --ignore-eos --temperature 0 \
			--parallel 1 -c 4096 </tmp/prefix4.txt 2>&1 >/dev/null |
			grep -o 'prompt [0-9]* tokens in [0-9.]* ms\|[0-9]* prompts.*cached)' >>"$out/prefix-ab.txt"
	done
done
cat "$out/prefix-ab.txt"
