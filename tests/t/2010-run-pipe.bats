#!/usr/bin/env bats
# 2010-run-pipe.bats - the pipe stages (tokenize | generate | detokenize):
# exact greedy continuations against transformers, the pipe printing what
# -p prints, --jsonl on each stage, --echo, and tokenizer round trips.

load test_helper

# golden_greedy NAME - feed the golden prompt ids to the generate stage and
# compare the 32 ids with the continuation transformers produced.
golden_greedy() {
	local dir=$GOLDEN/$1 prompt want
	prompt=$(greedy_ids "$dir/expected.json" prompt)
	want=$(greedy_ids "$dir/expected.json" tokens)
	[ "$(count_words "$prompt")" -gt 0 ]
	expect_eq "$(count_words "$want")" 32 "expected ids"
	run -0 --separate-stderr sh -c 'printf "%s\n" "$1" |
		atlas-run generate -m "$2" --temperature 0 --ignore-eos -n 32 -q' sh "$prompt" "$dir"
	expect_eq "$output" "$want" "greedy continuation of $1"
}

@test "greedy continuation matches transformers: llama3" {
	golden_greedy llama3
}

@test "greedy continuation matches transformers: llama-tied" {
	golden_greedy llama-tied
}

@test "greedy continuation matches transformers: mistral" {
	golden_greedy mistral
}

@test "greedy continuation matches transformers: qwen2" {
	golden_greedy qwen2
}

@test "greedy continuation matches transformers: qwen3" {
	golden_greedy qwen3
}

@test "greedy continuation matches transformers: qwen3-bf16" {
	golden_greedy qwen3-bf16
}

# pipe_vs_prompt [FLAGS...] - the three stages print byte for byte what
# atlas-run -p prints for "The meaning of life is" with the same flags.
pipe_vs_prompt() {
	local t=$BATS_TEST_TMPDIR
	printf 'The meaning of life is\n' | atlas-run tokenize "${MODEL_FLAGS[@]}" >"$t/ids"
	atlas-run generate "${MODEL_FLAGS[@]}" "$@" -q <"$t/ids" >"$t/gen"
	atlas-run detokenize "${MODEL_FLAGS[@]}" <"$t/gen" >"$t/pipe"
	atlas-run "${MODEL_FLAGS[@]}" -p "The meaning of life is" "$@" -q >"$t/direct"
	expect_eq "$(count_words "$(cat "$t/gen")")" 16 "generated ids"
	expect_same_file "$t/pipe" "$t/direct"
}

@test "tokenize | generate | detokenize prints what -p prints: default model" {
	MODEL_FLAGS=()
	pipe_vs_prompt -n 16 --seed 7
}

@test "tokenize | generate | detokenize prints what -p prints: greedy on llama3" {
	MODEL_FLAGS=(-m "$GOLDEN/llama3")
	pipe_vs_prompt -n 16 --seed 7 --temperature 0 --ignore-eos
}

@test "tokenize | generate | detokenize prints what -p prints: sampling on llama3" {
	MODEL_FLAGS=(-m "$GOLDEN/llama3")
	# shellcheck disable=SC2086
	pipe_vs_prompt -n 16 --seed 7 --ignore-eos $SAMPLING_FLAGS
}

@test "tokenize | generate | detokenize prints what -p prints: sampling on qwen3-bf16" {
	MODEL_FLAGS=(-m "$GOLDEN/qwen3-bf16")
	# shellcheck disable=SC2086
	pipe_vs_prompt -n 16 --seed 3 --ignore-eos $SAMPLING_FLAGS --presence-penalty 0.5 --frequency-penalty 0.3
}

@test "the stages handle several lines, one output line each" {
	local m=$GOLDEN/llama3 t=$BATS_TEST_TMPDIR
	printf 'hello\nThe meaning of life is\n' | atlas-run tokenize -m "$m" >"$t/ids"
	expect_eq "$(wc -l <"$t/ids")" 2 "tokenize lines"
	atlas-run generate -m "$m" -n 8 --temperature 0 --ignore-eos -q <"$t/ids" >"$t/gen"
	expect_eq "$(wc -l <"$t/gen")" 2 "generate lines"
	# each line as if alone
	head -n 1 "$t/ids" | atlas-run generate -m "$m" -n 8 --temperature 0 --ignore-eos -q >"$t/one"
	expect_eq "$(head -n 1 "$t/gen")" "$(cat "$t/one")" "first line"
	atlas-run detokenize -m "$m" <"$t/gen" >"$t/text"
	atlas-run -m "$m" -p hello -p "The meaning of life is" -n 8 --temperature 0 --ignore-eos -q >"$t/want"
	expect_same_file "$t/text" "$t/want"
}

@test "tokenize --jsonl writes {\"ids\": [...]} with the plain ids" {
	run -0 --separate-stderr sh -c 'printf "The meaning of life is\n" | atlas-run tokenize'
	local plain=$output
	run -0 --separate-stderr sh -c 'printf "%s\n" "{\"text\": \"The meaning of life is\"}" | atlas-run tokenize --jsonl'
	expect_eq "$output" "{\"ids\": [$(printf '%s' "$plain" | sed 's/ /, /g')]}" "jsonl ids"
}

@test "generate --jsonl writes the plain ids and a finish_reason" {
	local m=$GOLDEN/llama3
	run -0 --separate-stderr sh -c 'echo 51 275 494 | atlas-run generate -m "$1" -n 6 --seed 7 --ignore-eos -q' sh "$m"
	local plain=$output
	run -0 --separate-stderr sh -c 'echo "{\"ids\": [51, 275, 494]}" |
		atlas-run generate -m "$1" --jsonl -n 6 --seed 7 --ignore-eos -q' sh "$m"
	expect_eq "$output" "{\"ids\": [$(printf '%s' "$plain" | sed 's/ /, /g')], \"finish_reason\": \"length\"}" "jsonl"
}

@test "detokenize --jsonl writes {\"text\": ...} with the plain text" {
	local m=$GOLDEN/llama-tied
	run -0 --separate-stderr sh -c 'echo 75 68 75 68 | atlas-run detokenize -m "$1"' sh "$m"
	local plain=$output
	expect_match "$plain" '^[a-z]+$' "plain text (ASCII for this check)"
	run -0 --separate-stderr sh -c 'echo "{\"ids\": [75, 68, 75, 68]}" | atlas-run detokenize -m "$1" --jsonl' sh "$m"
	expect_eq "$output" "{\"text\": \"$plain\"}" "jsonl"
}

@test "the --jsonl pipe gives the text of -p --jsonl" {
	local m=$GOLDEN/llama-tied t=$BATS_TEST_TMPDIR
	printf '{"text": "hello"}\n' | atlas-run tokenize -m "$m" --jsonl |
		atlas-run generate -m "$m" --jsonl -n 8 --temperature 0 -q |
		atlas-run detokenize -m "$m" --jsonl >"$t/pipe"
	printf '{"prompt": "hello"}\n' | atlas-run -m "$m" --jsonl -f - -n 8 --temperature 0 -q >"$t/direct"
	expect_eq "$(cat "$t/pipe")" "{\"text\": $(json_field "$(cat "$t/direct")" text)}" "pipe text"
}

@test "generate --echo prepends the prompt ids" {
	local m=$GOLDEN/llama3
	run -0 --separate-stderr sh -c 'echo 51 275 494 | atlas-run generate -m "$1" -n 5 --seed 7 --ignore-eos -q' sh "$m"
	local gen=$output
	run -0 --separate-stderr sh -c 'echo 51 275 494 | atlas-run generate -m "$1" -n 5 --seed 7 --ignore-eos -q --echo' sh "$m"
	expect_eq "$output" "51 275 494 $gen" "--echo"
	run -0 --separate-stderr sh -c 'echo "{\"ids\": [51, 275, 494]}" |
		atlas-run generate -m "$1" -n 5 --seed 7 --ignore-eos -q --echo --jsonl' sh "$m"
	expect_eq "$output" "{\"ids\": [51, 275, 494, $(printf '%s' "$gen" | sed 's/ /, /g')], \"finish_reason\": \"length\"}" "--echo --jsonl"
}

@test "tokenize | detokenize round-trips mixed text exactly" {
	local t=$BATS_TEST_TMPDIR m
	printf 'Hello, world! The café costs 5€. 日本語のテキスト 中文 한국어 🎉👍🏽 tabs\tand  spaces\n' >"$t/in"
	for m in "$DEFAULT_MODEL" "$GOLDEN/llama3" "$GOLDEN/mistral" "$GOLDEN/qwen2"; do
		atlas-run tokenize -m "$m" <"$t/in" >"$t/ids"
		# the tokenizer really split it (more than one id, fewer than bytes)
		[ "$(count_words "$(cat "$t/ids")")" -gt 1 ]
		atlas-run detokenize -m "$m" <"$t/ids" >"$t/out"
		expect_same_file "$t/out" "$t/in"
	done
}

@test "tokenize --whole reads all of stdin as one document" {
	local t=$BATS_TEST_TMPDIR
	printf 'one\ntwo\n' | atlas-run tokenize --whole >"$t/ids"
	expect_eq "$(wc -l <"$t/ids")" 1 "tokenize lines"
	atlas-run detokenize <"$t/ids" >"$t/out"
	printf 'one\ntwo\n\n' >"$t/want"
	expect_same_file "$t/out" "$t/want"
}

@test "tokenize --no-special adds no special ids" {
	run -0 --separate-stderr sh -c 'printf "hello\n" | atlas-run tokenize --no-special'
	local ns=$output
	run -0 --separate-stderr sh -c 'printf "hello\n" | atlas-run tokenize'
	# this tokenizer has no BOS: both are the plain text's ids
	expect_eq "$ns" "$output" "ids"
	run -0 --separate-stderr sh -c 'printf "%s\n" "$1" | atlas-run detokenize' sh "$ns"
	expect_eq "$output" hello "detokenized"
}

@test "an empty line tokenizes to an empty line and detokenizes to one" {
	run -0 --separate-stderr sh -c 'printf "a\n\nb\n" | atlas-run tokenize'
	expect_eq "$output" "$(printf '%s\n\n%s' "$(echo a | atlas-run tokenize)" "$(echo b | atlas-run tokenize)")" "ids"
	run -0 --separate-stderr sh -c 'printf "a\n\nb\n" | atlas-run tokenize | atlas-run detokenize'
	expect_eq "$output" "$(printf 'a\n\nb')" "text"
}
