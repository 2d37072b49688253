#!/bin/bash
# gpu-session-bench.sh OUT [BUILD] - the engine-session numbers (issue 17)
# on an H100/H200, with binaries from scripts/gpu-carry.sh in BUILD
# (default .gpubuild). One Qwen3-8B-shape checkpoint of random weights
# (scripts/make-synthetic.py) serves every part, all in one call:
#   offline.txt   atlas-bench generate --batch 64 --prompt 128 --gen 256
#                 (the engine's own batched loop) against atlas-run
#                 generate --jsonl with the same 64 x 128-token prompts
#                 through the session's scheduler: the tok/s ratio
#   batch1.txt    batch-1 decode: atlas-bench decode against atlas-run -p
#                 through the session (128-token prompt, 256 tokens)
#   prefix.txt    time to first token of two prompts sharing a 2,000-token
#                 prefix, one after the other (--parallel 1), with the
#                 prefix cache and without
#   summary.md    one line per part
set -u
. "$(dirname "$0")/gpu-prelude.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >"$out/gpu.txt" 2>&1
run=$build/atlas-run
# 64 prompts of 128 random ids below the shipped tokenizer's 4,096
python3 - "$out" <<'EOF'
import json, random, sys
r = random.Random(17)
with open("/tmp/p64.jsonl", "w") as f:
    for i in range(64):
        f.write(json.dumps({"ids": [r.randrange(5, 4000) for _ in range(128)]}) + "\n")
pre = [r.randrange(5, 4000) for _ in range(2000)]
with open("/tmp/prefix.txt", "w") as f:
    for i in range(2):
        f.write(" ".join(map(str, pre + [r.randrange(5, 4000) for _ in range(24)])) + "\n")
with open("/tmp/p1.txt", "w") as f:
    f.write(" ".join(str(r.randrange(5, 4000)) for _ in range(128)) + "\n")
EOF
summary=$out/summary.md
echo "| part | numbers |" >"$summary"
echo "|---|---|" >>"$summary"

# offline batching: the same work through the bench loop and through atlas-run
timeout 300 "$build/atlas-bench" generate --synthetic qwen3-8b --batch 64 --prompt 128 --gen 256 \
	--json >"$out/bench-generate.json" 2>"$out/offline.txt"
echo "--- atlas-run generate --jsonl, 64 x 128 -> 256" >>"$out/offline.txt"
timeout 300 "$run" generate -m "$m" --jsonl -n 256 --ignore-eos --temperature 0 --parallel 64 \
	-c 512 </tmp/p64.jsonl >"$out/run64.jsonl" 2>>"$out/offline.txt"
bench_tps=$(python3 -c "import json;d=json.load(open('$out/bench-generate.json'));print(d['results'][0]['e2e_tok_s'])" 2>/dev/null)
run_tps=$(grep -o '[0-9.]* tok/s$' "$out/offline.txt" | tail -1 | cut -d' ' -f1)
echo "| offline 64x128->256 | bench generate e2e $bench_tps tok/s; atlas-run --jsonl $run_tps tok/s; ratio $(python3 -c "print(round($run_tps/$bench_tps,3))" 2>/dev/null) |" >>"$summary"

# batch 1 through the session
timeout 300 "$build/atlas-bench" decode --synthetic qwen3-8b --batch 1 --prompt 128 --gen 256 \
	--json >"$out/bench-decode1.json" 2>"$out/batch1.txt"
echo "--- atlas-run generate, one 128-token prompt, 256 tokens" >>"$out/batch1.txt"
for i in 1 2 3; do
	timeout 120 "$run" generate -m "$m" -n 256 --ignore-eos --temperature 0 </tmp/p1.txt \
		>/dev/null 2>>"$out/batch1.txt"
done
echo "| batch-1 decode | $(grep -E '^ +1 ' "$out/batch1.txt" | tr -s ' ' | head -1); atlas-run: $(grep -o 'generated 256 tokens in [0-9.]* ms ([0-9.]* tok/s)' "$out/batch1.txt" | tr '\n' ';') |" >>"$summary"

# prefix cache: two prompts sharing 2,000 tokens, one after the other
for mode in cache no-cache; do
	flag=""
	[ $mode = no-cache ] && flag=--no-prefix-cache
	echo "--- $mode" >>"$out/prefix.txt"
	timeout 120 "$run" generate -m "$m" -n 4 --ignore-eos --temperature 0 --parallel 1 -c 4096 \
		$flag </tmp/prefix.txt >/dev/null 2>>"$out/prefix.txt"
done
echo "| prefix cache, 2,000 shared tokens | $(grep -o 'first token after [0-9.]* ms' "$out/prefix.txt" | tr '\n' ';') |" >>"$summary"
cat "$summary"
