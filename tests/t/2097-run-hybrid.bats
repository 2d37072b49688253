#!/usr/bin/env bats
# 2097-run-hybrid.bats - atlas-run on the hybrid Gated-DeltaNet +
# attention MoE fixtures (qwen3_next, qwen3_5_moe_text) on the CPU: the
# greedy continuation transformers produced, and a sequence's recurrent
# state through the engine: the same bytes for a prompt alone and among
# others (-f), and with speculative decoding (n-gram drafts and a draft
# model, both of which cut the recurrent state back after rejections).

load test_helper

G=$ATLAS_SRC/tests/fixtures/golden

golden_greedy() {
	local dir=$G/$1 prompt want
	prompt=$(greedy_ids "$dir/expected.json" prompt)
	want=$(greedy_ids "$dir/expected.json" tokens)
	expect_eq "$(count_words "$want")" 32 "expected ids"
	run -0 --separate-stderr sh -c 'printf "%s\n" "$1" |
		atlas-run generate -m "$2" --device cpu --temperature 0 --ignore-eos -n 32 -q' sh "$prompt" "$dir"
	expect_eq "$output" "$want" "greedy continuation of $1"
}

@test "greedy continuation matches transformers: qwen3_next" {
	golden_greedy qwen3-next-bf16
}

@test "greedy continuation matches transformers: qwen3_5_moe_text" {
	golden_greedy qwen3-5-moe
}

# gen M OUT [ARGS...] - 40 greedy tokens of a fixed prompt into OUT
gen() {
	local m=$1 o=$2
	shift 2
	atlas-run --device cpu -m "$G/$m" --temperature 0 --ignore-eos -n 40 "$@" \
		-p "the cat sat on the mat and the cat sat on the" >"$o" 2>"$o.err"
}

@test "speculative decoding: n-gram and draft-model drafts give the plain bytes" {
	local m o=$BATS_TEST_TMPDIR
	for m in qwen3-next-bf16 qwen3-5-moe; do
		gen $m "$o/plain"
		expect_match "$(cat "$o/plain")" '[^[:space:]]' "$m text"
		gen $m "$o/ngram" --speculative ngram
		expect_same_file "$o/plain" "$o/ngram"
		expect_match "$(tail -1 "$o/ngram.err")" 'speculative \(ngram\): [0-9]+ of [1-9][0-9]* drafts accepted' "$m ngram"
		# the model as its own draft: every draft accepted
		gen $m "$o/self" --draft-model "$G/$m"
		expect_same_file "$o/plain" "$o/self"
		expect_match "$(tail -1 "$o/self.err")" 'speculative \(draft\): ([0-9]+) of \1 drafts accepted \(100%\)' "$m self-draft"
	done
	# the other hybrid model as the draft: few accepted, the same bytes
	gen qwen3-next-bf16 "$o/other" --draft-model "$G/qwen3-5-moe"
	gen qwen3-next-bf16 "$o/plain2"
	expect_same_file "$o/plain2" "$o/other"
}

@test "prompts run together (-f, --parallel 4) give the bytes each gives alone" {
	local o=$BATS_TEST_TMPDIR args p
	printf '%s\n' "one two three" "a much longer prompt that runs for many more tokens than the others do" \
		"x" "the cat sat" >"$o/prompts"
	for args in "--temperature 0" "--temperature 1 --seed 5"; do
		# shellcheck disable=SC2086
		atlas-run --device cpu -m "$G/qwen3-next-bf16" -f "$o/prompts" --parallel 4 -n 24 \
			--ignore-eos $args -q >"$o/out"
		: >"$o/want"
		while IFS= read -r p; do
			# shellcheck disable=SC2086
			atlas-run --device cpu -m "$G/qwen3-next-bf16" -p "$p" -n 24 --ignore-eos $args \
				-q >>"$o/want"
		done <"$o/prompts"
		expect_same_file "$o/out" "$o/want"
	done
}
