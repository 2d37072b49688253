#!/usr/bin/env bats
# 4030-bench-moe.bats - atlas-bench and mixtures of experts: the MoE
# shapes in --help, the man page, the completions and the unknown-shape
# error; and the decode floor on an MoE golden model, whose weight bytes
# count the experts the steps read (the CPU backend counts them): top k
# per sparse layer at batch 1, more at batch 4, null for a dense model.

load test_helper

setup() {
	export ATLAS_HOME=$BATS_TEST_TMPDIR/home
}

@test "--help, the man page and the completions list the MoE shapes" {
	run -0 --separate-stderr atlas-bench --help
	expect_contains "$output" "qwen3-30b-a3b, mixtral-8x7b"
	for f in "$ATLAS_SRC/man/atlas-bench.1" "$ATLAS_SRC/completions/bash/atlas-bench" \
		"$ATLAS_SRC/completions/zsh/_atlas-bench"; do
		grep -q "qwen3-30b-a3b" "$f" || { echo "no qwen3-30b-a3b in $f"; false; }
		grep -q "mixtral-8x7b" "$f" || { echo "no mixtral-8x7b in $f"; false; }
	done
	run -1 --separate-stderr atlas-bench decode --synthetic gpt-9
	expect_contains "$stderr" "qwen3-30b-a3b, mixtral-8x7b"
}

# field JSON KEY - the values of KEY in the result rows, space-separated.
field() {
	sed -n "s/^ *\"$2\": *\\([^,]*\\),\\{0,1\\}\$/\\1/p" <<<"$1" | tr '\n' ' '
}

@test "decode on an MoE golden: the experts read per step in the floor" {
	# qwen3-moe: 3 layers, layer 1 dense, top 2 -> 4 reads a token
	run -0 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3-moe" --device cpu \
		--batch 1,4 --prompt 4 --gen 2 --no-record --json
	local reads bytes
	reads=($(field "$output" experts_read_per_step))
	bytes=($(field "$output" expert_bytes_per_step))
	expect_eq "${#reads[@]}" 2 "rows"
	expect_eq "${reads[0]}" "4.0" "batch 1"
	awk -v r="${reads[1]}" 'BEGIN { exit !(r >= 4 && r <= 16) }' || {
		echo "batch 4 read ${reads[1]} experts per step"
		false
	}
	# one expert: [32, 64] x2 + [64, 32] in F32
	awk -v b="${bytes[0]}" 'BEGIN { exit !(b == 4 * 3 * 32 * 64 * 4) }' || {
		echo "batch 1 expert bytes ${bytes[0]}"
		false
	}
	run -0 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3" --device cpu --prompt 4 \
		--gen 2 --no-record --json
	expect_contains "$output" '"expert_bytes_per_step":null'
	expect_contains "$output" '"experts_read_per_step":null'
}
