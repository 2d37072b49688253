#!/usr/bin/env bats
# 2030-run-sampling.bats - seeds, greedy decoding, the defaults from
# generation_config.json, penalties, stop strings, end of sequence and the
# context limit.

load test_helper

PROMPT="The meaning of life is"

@test "the same seed gives the same output" {
	local a b
	# the default model's own sampling settings (generation_config.json)
	a=$(atlas-run -p "$PROMPT" -n 16 --seed 11 -q | od -An -tx1)
	b=$(atlas-run -p "$PROMPT" -n 16 --seed 11 -q | od -An -tx1)
	expect_eq "$b" "$a" "default model, seed 11"
	# sampling where the seed matters (see the next test)
	a=$(atlas-run -p "$PROMPT" -n 16 --temperature 10 --seed 1 -q | od -An -tx1)
	b=$(atlas-run -p "$PROMPT" -n 16 --temperature 10 --seed 1 -q | od -An -tx1)
	expect_eq "$b" "$a" "default model, --temperature 10, seed 1"
	# shellcheck disable=SC2086
	a=$(echo 51 275 494 | atlas-run generate -m "$GOLDEN/llama3" -n 16 $SAMPLING_FLAGS --seed 7 -q)
	# shellcheck disable=SC2086
	b=$(echo 51 275 494 | atlas-run generate -m "$GOLDEN/llama3" -n 16 $SAMPLING_FLAGS --seed 7 -q)
	expect_eq "$b" "$a" "llama3, seed 7"
}

@test "different seeds give different output" {
	local a b
	# The random models' logits are peaked (a few output rows of large
	# norm), so at their own temperatures most seeds pick the same tokens;
	# at temperature 10 the seed shows.
	a=$(atlas-run -m "$GOLDEN/qwen3" -p "$PROMPT" -n 16 --temperature 10 --seed 1 -q | od -An -tx1)
	b=$(atlas-run -m "$GOLDEN/qwen3" -p "$PROMPT" -n 16 --temperature 10 --seed 2 -q | od -An -tx1)
	if [ "$a" = "$b" ]; then
		echo "qwen3: seeds 1 and 2 print the same: $a" >&2
		false
	fi
	# shellcheck disable=SC2086
	a=$(echo 51 275 494 | atlas-run generate -m "$GOLDEN/llama3" -n 16 $SAMPLING_FLAGS --temperature 10 --seed 7 -q)
	# shellcheck disable=SC2086
	b=$(echo 51 275 494 | atlas-run generate -m "$GOLDEN/llama3" -n 16 $SAMPLING_FLAGS --temperature 10 --seed 8 -q)
	if [ "$a" = "$b" ]; then
		echo "llama3: seeds 7 and 8 print the same: $a" >&2
		false
	fi
}

@test "--temperature 0 does not depend on --seed" {
	local a b m
	for m in "$DEFAULT_MODEL" "$GOLDEN/llama3"; do
		a=$(atlas-run -m "$m" -p "$PROMPT" -n 16 --temperature 0 --seed 1 -q | od -An -tx1)
		b=$(atlas-run -m "$m" -p "$PROMPT" -n 16 --temperature 0 --seed 2 -q | od -An -tx1)
		expect_eq "$b" "$a" "$m, seeds 1 and 2"
		# the other samplers do not matter once greedy
		# shellcheck disable=SC2086
		b=$(atlas-run -m "$m" -p "$PROMPT" -n 16 $SAMPLING_FLAGS --repeat-penalty 1 --temperature 0 --seed 3 -q | od -An -tx1)
		expect_eq "$b" "$a" "$m, greedy with top-k/top-p/min-p set"
	done
}

@test "--top-k 1 at any temperature is greedy" {
	local a b
	a=$(echo 51 275 494 | atlas-run generate -m "$GOLDEN/llama3" -n 16 --temperature 0 -q)
	b=$(echo 51 275 494 | atlas-run generate -m "$GOLDEN/llama3" -n 16 --temperature 5 --top-k 1 --seed 3 -q)
	expect_eq "$b" "$a" "ids"
}

@test "without do_sample in generation_config.json the default is greedy" {
	# the golden models' generation_config.json has no do_sample
	local greedy a b
	greedy=$(echo 51 275 494 | atlas-run generate -m "$GOLDEN/llama3" -n 16 --temperature 0 -q)
	a=$(echo 51 275 494 | atlas-run generate -m "$GOLDEN/llama3" -n 16 --seed 1 -q)
	b=$(echo 51 275 494 | atlas-run generate -m "$GOLDEN/llama3" -n 16 --seed 2 -q)
	expect_eq "$a" "$greedy" "seed 1"
	expect_eq "$b" "$greedy" "seed 2"
}

@test "do_sample in generation_config.json turns sampling on" {
	local m greedy a b
	m=$(model_copy "$GOLDEN/llama3" sample)
	printf '{\n  "do_sample": true,\n  "eos_token_id": 1021,\n  "temperature": 1.0\n}\n' \
		>"$m/generation_config.json"
	greedy=$(echo 51 275 494 | atlas-run generate -m "$m" -n 16 --temperature 0 -q)
	a=$(echo 51 275 494 | atlas-run generate -m "$m" -n 16 --seed 1 -q)
	b=$(echo 51 275 494 | atlas-run generate -m "$m" -n 16 --seed 2 -q)
	if [ "$a" = "$greedy" ] || [ "$a" = "$b" ]; then
		printf 'sampling did not happen:\n greedy %s\n seed 1 %s\n seed 2 %s\n' "$greedy" "$a" "$b" >&2
		false
	fi
}

@test "the penalties change a greedy continuation that repeats an id" {
	local m=$GOLDEN/llama3 plain f out
	plain=$(echo 51 275 494 | atlas-run generate -m "$m" -n 24 --temperature 0 -q)
	# the plain continuation repeats an id: the penalties have work to do
	[ "$(printf '%s\n' "$plain" | tr ' ' '\n' | sort | uniq -d | wc -l)" -gt 0 ]
	for f in "--repeat-penalty 1.5" "--presence-penalty 1.5" "--frequency-penalty 1.5"; do
		# shellcheck disable=SC2086
		out=$(echo 51 275 494 | atlas-run generate -m "$m" -n 24 --temperature 0 $f -q)
		expect_eq "$(count_words "$out")" 24 "ids with $f"
		if [ "$out" = "$plain" ]; then
			echo "$f changed nothing: $out" >&2
			false
		fi
	done
	# the neutral values change nothing
	out=$(echo 51 275 494 | atlas-run generate -m "$m" -n 24 --temperature 0 -q \
		--repeat-penalty 1 --presence-penalty 0 --frequency-penalty 0)
	expect_eq "$out" "$plain" "neutral penalties"
}

# llama3's golden greedy prompt as text (it holds an invalid UTF-8 byte,
# which -p passes through) and its 32-token continuation as text.
llama3_texts() {
	local dir=$GOLDEN/llama3
	PROMPT_TEXT=$(greedy_ids "$dir/expected.json" prompt | atlas-run detokenize -m "$dir")
	greedy_ids "$dir/expected.json" tokens | atlas-run detokenize -m "$dir" >"$BATS_TEST_TMPDIR/full"
	# -p of the text gives the golden continuation
	atlas-run -m "$dir" -p "$PROMPT_TEXT" --temperature 0 --ignore-eos -n 32 -q >"$BATS_TEST_TMPDIR/p"
	expect_same_file "$BATS_TEST_TMPDIR/p" "$BATS_TEST_TMPDIR/full"
	FULL=$(cat "$BATS_TEST_TMPDIR/full")
}

# stop_at FRACTION - a 3-byte piece of $FULL starting at that fraction of
# its length (the greedy text changes when the fixtures are regenerated,
# so the stop strings are taken from it rather than written here)
stop_at() {
	local n=${#FULL}
	printf '%s' "${FULL:$((n * $1 / 100)):3}"
}

@test "--stop truncates the text before the stop string" {
	llama3_texts
	local stop
	stop=$(stop_at 50)
	[ -n "$stop" ]
	run -0 --separate-stderr atlas-run -m "$GOLDEN/llama3" -p "$PROMPT_TEXT" \
		--temperature 0 --ignore-eos -n 32 --stop "$stop"
	expect_eq "$output" "${FULL%%"$stop"*}" "text"
	expect_contains "$stderr" "finish stop" "stderr"
	# the stop string is not at the start: something was printed
	[ -n "${FULL%%"$stop"*}" ]
}

@test "--stop twice: the first to appear wins" {
	llama3_texts
	local late early a b want
	late=$(stop_at 75)
	early=$(stop_at 25)
	a=${FULL%%"$late"*}
	b=${FULL%%"$early"*}
	want=$a
	[ ${#b} -lt ${#a} ] && want=$b
	[ ${#want} -lt ${#FULL} ]
	run -0 --separate-stderr atlas-run -m "$GOLDEN/llama3" -p "$PROMPT_TEXT" \
		--temperature 0 --ignore-eos -n 32 -q --stop "$late" --stop "$early"
	expect_eq "$output" "$want" "text"
}

@test "--stop of a string that never appears changes nothing" {
	llama3_texts
	run -0 --separate-stderr atlas-run -m "$GOLDEN/llama3" -p "$PROMPT_TEXT" \
		--temperature 0 --ignore-eos -n 32 --stop 'no such text'
	expect_eq "$output" "$FULL" "text"
	expect_contains "$stderr" "finish length" "stderr"
}

@test "--stop with --jsonl: finish_reason stop and the truncated text" {
	local m=$GOLDEN/llama-tied full stop want
	run -0 --separate-stderr atlas-run -m "$m" -p hello -n 16 --temperature 0 -q
	full=$output
	stop=${full:6:3}
	[ -n "$stop" ]
	want=${full%%"$stop"*}
	run -0 --separate-stderr sh -c 'echo "{\"prompt\": \"hello\"}" |
		atlas-run -m "$1" --jsonl -f - -n 16 --temperature 0 -q --stop "$2"' sh "$m" "$stop"
	expect_eq "$(json_field "$output" finish_reason)" '"stop"' "finish_reason"
	# the JSON text is the plain text cut before the stop string
	run -0 atlas-run -m "$m" -p hello -n 16 --temperature 0 -q --stop "$stop"
	expect_eq "$output" "$want" "plain text with --stop"
}

@test "an end-of-sequence id stops generation; --ignore-eos keeps going" {
	local m prompt first second
	# make the first id qwen3 produces greedily its end-of-sequence id
	prompt=$(greedy_ids "$GOLDEN/qwen3/expected.json" prompt)
	first=$(greedy_ids "$GOLDEN/qwen3/expected.json" tokens | cut -d' ' -f1)
	m=$(model_copy "$GOLDEN/qwen3" eos)
	sed -i "s/\"eos_token_id\": 1021/\"eos_token_id\": $first/" "$m/config.json" "$m/generation_config.json"
	grep -q "\"eos_token_id\": $first" "$m/config.json"

	run -0 --separate-stderr sh -c 'echo "$2" | atlas-run generate -m "$1" --temperature 0 -n 8' sh "$m" "$prompt"
	expect_eq "$output" "" "ids without --ignore-eos"
	expect_contains "$stderr" "finish stop" "stderr"

	run -0 --separate-stderr sh -c 'echo "$2" | atlas-run generate -m "$1" --temperature 0 -n 8 --ignore-eos' sh "$m" "$prompt"
	expect_eq "$output" "$(greedy_ids "$GOLDEN/qwen3/expected.json" tokens | cut -d' ' -f1-8)" "ids with --ignore-eos"
	expect_contains "$stderr" "finish length" "stderr"

	run -0 --separate-stderr sh -c 'echo "{\"ids\": [$2]}" |
		atlas-run generate -m "$1" --temperature 0 -n 8 --jsonl -q' sh "$m" "$(echo "$prompt" | sed 's/ /, /g')"
	expect_eq "$output" '{"ids": [], "finish_reason": "stop"}' "jsonl"
}

@test "generation ends with finish length when the context fills up" {
	run -0 --separate-stderr sh -c 'echo 51 275 494 | atlas-run generate -m "$1" -c 16 -n 100 --ignore-eos' sh "$GOLDEN/llama3"
	local n
	n=$(count_words "$output")
	# 3 prompt ids + the generated ones fit 16 positions (the last id
	# sampled is never fed back)
	[ "$n" -ge 13 ]
	[ "$n" -le 14 ]
	expect_contains "$stderr" "finish length" "stderr"
}

@test "-c sets the context the model allocates" {
	run -0 --separate-stderr atlas-run -c 100 -p hi -n 2 -q -v
	expect_contains "$stderr" "context 100" "stderr"
	# without -c: the model's max_position_embeddings, at most 4096
	local mp
	mp=$(sed -n 's/.*"max_position_embeddings": \([0-9]*\).*/\1/p' "$DEFAULT_MODEL/config.json")
	[ "$mp" -le 4096 ]
	run -0 --separate-stderr atlas-run -p hi -n 2 -q -v
	expect_contains "$stderr" "context $mp" "stderr"
}
