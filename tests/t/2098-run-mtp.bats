#!/usr/bin/env bats
# 2098-run-mtp.bats - atlas-run --speculative mtp: drafts from the
# checkpoint's own multi-token prediction head (mtp.*), on the hybrid
# fixtures of tests/fixtures/golden, which carry one (a random head in
# qwen3-next-bf16, the "echo" head of scripts/add-mtp-head.py in
# qwen3-5-moe) on the CPU: the plain bytes greedy and seeded, for one
# prompt and many (-f), with any --num-draft; the timing line's draft
# counts; atlas-load's view of the head; and a checkpoint without one
# refused by name (a misshapen head: tests/unit/test-mtp.c).

load test_helper

G=$ATLAS_SRC/tests/fixtures/golden

# gen M OUT [ARGS...] - 40 tokens of a fixed prompt into OUT (stderr OUT.err)
gen() {
	local m=$1 o=$2
	shift 2
	atlas-run --device cpu -m "$G/$m" --ignore-eos -n 40 "$@" \
		-p "the cat sat on the mat and the cat sat on the" >"$o" 2>"$o.err"
}

@test "greedy and seeded output with MTP drafts is the plain bytes" {
	local m k args o=$BATS_TEST_TMPDIR
	for m in qwen3-next-bf16 qwen3-5-moe; do
		for args in "--temperature 0" "--temperature 0.9 --seed 3"; do
			# shellcheck disable=SC2086
			gen $m "$o/plain" $args
			expect_match "$(cat "$o/plain")" '[^[:space:]]' "$m text"
			for k in 1 4; do
				# shellcheck disable=SC2086
				gen $m "$o/mtp" $args --speculative mtp --num-draft $k
				expect_same_file "$o/plain" "$o/mtp"
				expect_match "$(tail -1 "$o/mtp.err")" \
					'speculative \(mtp\): [0-9]+ of [1-9][0-9]* drafts accepted' "$m k=$k $args"
			done
		done
	done
}

@test "prompts run together (-f, --parallel 3) with MTP drafts give the plain bytes" {
	local o=$BATS_TEST_TMPDIR
	printf '%s\n' "one two three" "a much longer prompt that runs for many more tokens than the others" \
		"the cat sat" >"$o/prompts"
	atlas-run --device cpu -m "$G/qwen3-5-moe" -f "$o/prompts" --parallel 3 -n 24 \
		--ignore-eos --temperature 0 -q >"$o/want"
	atlas-run --device cpu -m "$G/qwen3-5-moe" -f "$o/prompts" --parallel 3 -n 24 \
		--ignore-eos --temperature 0 -q --speculative mtp >"$o/got"
	expect_same_file "$o/want" "$o/got"
}

@test "atlas-load shows and checks the head" {
	run -0 atlas-load inspect "$G/qwen3-next-bf16"
	expect_contains "$output" "mtp head:        1 layer, 41 tensors, 83872 parameters (--speculative mtp)" "text"
	run -0 atlas-load inspect --json "$G/qwen3-5-moe"
	expect_contains "$output" '"mtp_head":{"layers":1,"tensors":41,"parameters":83872}' "json"
	run -0 atlas-load inspect --json "$ATLAS_SRC/models/default"
	expect_contains "$output" '"mtp_head":null' "no head"
	run -0 atlas-load validate "$G/qwen3-next-bf16"
	expect_contains "$output" "valid (0 warnings)" "the head is read, not skipped"
}

@test "--speculative mtp without an MTP head in the checkpoint: exit 1 naming it" {
	run -1 --separate-stderr atlas-run --device cpu -m "$G/qwen3-bf16" --speculative mtp -p hi -n 4
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "cannot load the MTP head of" "stderr"
	expect_contains "$stderr" "no mtp.fc.weight" "stderr"
}
