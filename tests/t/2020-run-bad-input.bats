#!/usr/bin/env bats
# 2020-run-bad-input.bats - broken models and bad input: each must fail
# with a non-zero status and a message on stderr naming what is wrong
# (file, field, tensor, id), never crash; invalid UTF-8 is not an error.

load test_helper

# expect_no_crash - the last `run` ended by exit(), not by a signal.
expect_no_crash() {
	if [ "$status" -ge 128 ]; then
		echo "killed by signal $((status - 128)); stderr: $stderr" >&2
		return 1
	fi
}

@test "missing model directory: names it" {
	run -1 --separate-stderr atlas-run -m /nonexistent/model -p hi -n 2
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "'/nonexistent/model'" "stderr"
}

@test "missing model directory in a pipe stage: names it" {
	run -1 --separate-stderr sh -c 'echo hi | atlas-run tokenize -m /nonexistent/model'
	expect_contains "$stderr" "'/nonexistent/model'" "stderr"
	run -1 --separate-stderr sh -c 'echo 1 2 | atlas-run generate -m /nonexistent/model'
	expect_contains "$stderr" "'/nonexistent/model'" "stderr"
}

@test "a directory without model files: names what is missing" {
	mkdir -p "$BATS_TEST_TMPDIR/empty"
	echo '{}' >"$BATS_TEST_TMPDIR/empty/config.json"
	run --separate-stderr atlas-run -m "$BATS_TEST_TMPDIR/empty" -p hi -n 2
	expect_no_crash
	[ "$status" -eq 1 ]
	expect_contains "$stderr" "$BATS_TEST_TMPDIR/empty" "stderr"
}

@test "config.json without hidden_size: names the field" {
	local m
	m=$(model_copy "$DEFAULT_MODEL" nohidden)
	sed -i '/"hidden_size"/d' "$m/config.json"
	if grep -q hidden_size "$m/config.json"; then false; fi
	run -1 --separate-stderr atlas-run -m "$m" -p hi -n 2
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "'hidden_size'" "stderr"
	expect_contains "$stderr" "config.json" "stderr"
}

@test "config.json that is not JSON: names the file" {
	local m
	m=$(model_copy "$DEFAULT_MODEL" badjson)
	printf '{"hidden_size": 128,\n' >"$m/config.json"
	run --separate-stderr atlas-run -m "$m" -p hi -n 2
	expect_no_crash
	[ "$status" -eq 1 ]
	expect_contains "$stderr" "config.json" "stderr"
}

@test "safetensors truncated to half: names the file and a tensor" {
	local m size
	m=$(model_copy "$DEFAULT_MODEL" trunc)
	size=$(wc -c <"$DEFAULT_MODEL/model.safetensors")
	head -c $((size / 2)) "$DEFAULT_MODEL/model.safetensors" >"$m/model.safetensors"
	run -1 --separate-stderr atlas-run -m "$m" -p hi -n 2
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "$m/model.safetensors" "stderr"
	expect_match "$stderr" "tensor 'model\.[a-z0-9_.]+'" "stderr"
	expect_contains "$stderr" "past the end" "stderr"
}

@test "safetensors with a header longer than the file: names the file" {
	local m
	m=$(model_copy "$DEFAULT_MODEL" shorthead)
	head -c 100 "$DEFAULT_MODEL/model.safetensors" >"$m/model.safetensors"
	run --separate-stderr atlas-run -m "$m" -p hi -n 2
	expect_no_crash
	[ "$status" -eq 1 ]
	expect_contains "$stderr" "$m/model.safetensors" "stderr"
}

@test "tensor shape that disagrees with config.json: names the tensor and both shapes" {
	local m
	m=$(model_copy "$DEFAULT_MODEL" shape)
	local f
	f=$(sed -n 's/.*"intermediate_size": \([0-9]*\).*/\1/p' "$m/config.json")
	[ -n "$f" ]
	sed -i "s/\"intermediate_size\": $f/\"intermediate_size\": $((f + 128))/" "$m/config.json"
	grep -q "\"intermediate_size\": $((f + 128))" "$m/config.json"
	run -1 --separate-stderr atlas-run -m "$m" -p hi -n 2
	expect_empty "$output" "stdout"
	expect_match "$stderr" "tensor 'model\.layers\.[0-9]+\.mlp\.[a-z_]+_proj\.weight'" "stderr"
	expect_contains "$stderr" "$f" "stderr (the file's shape)"
	expect_contains "$stderr" "$((f + 128))" "stderr (config's shape)"
}

@test "unknown architecture: lists the supported families" {
	local m
	m=$(model_copy "$DEFAULT_MODEL" neox)
	sed -i 's/"model_type": "qwen3"/"model_type": "gpt_neox"/; s/Qwen3ForCausalLM/GPTNeoXForCausalLM/' "$m/config.json"
	grep -q GPTNeoXForCausalLM "$m/config.json"
	run -1 --separate-stderr atlas-run -m "$m" -p hi -n 2
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "GPTNeoXForCausalLM" "stderr"
	local f
	for f in llama mistral qwen2 qwen3; do
		expect_contains "$stderr" "$f" "stderr (supported families)"
	done
}

@test "prompt longer than the context: clear error, exit 1" {
	local long
	long=$(printf 'word %.0s' $(seq 40))
	run -1 --separate-stderr atlas-run -c 16 -p "$long" -n 2
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "context" "stderr"
	expect_contains "$stderr" "16" "stderr"
}

@test "prompt ids longer than the context in the generate stage: exit 1" {
	run -1 --separate-stderr sh -c 'seq 1 40 | tr "\n" " " | sed "s/ \$/\n/" | atlas-run generate -c 16 -n 2'
	expect_contains "$stderr" "context" "stderr"
	expect_contains "$stderr" "line 1" "stderr"
}

@test "empty prompt: clear error" {
	run -1 --separate-stderr atlas-run -p "" -n 2
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "empty" "stderr"
}

@test "an empty id line in the generate stage: clear error naming the line" {
	run -1 --separate-stderr sh -c 'printf "\n" | atlas-run generate -n 2'
	expect_contains "$stderr" "empty" "stderr"
	expect_contains "$stderr" "line 1" "stderr"
}

@test "invalid UTF-8 in the prompt: exit 0, no crash" {
	run -0 --separate-stderr atlas-run -p "$(printf 'abc\377\376 def')" -n 4
	expect_match "$stderr" "$TIMING_RE" "stderr"
	expect_contains "$stderr" "generated 4 tokens" "stderr"
}

@test "invalid UTF-8 round-trips through tokenize | detokenize exactly" {
	local t=$BATS_TEST_TMPDIR m
	printf 'abc\377\376 def \300\200 \355\240\200 tail\360\n' >"$t/in"
	for m in "$DEFAULT_MODEL" "$GOLDEN/llama3"; do
		atlas-run tokenize -m "$m" <"$t/in" >"$t/ids"
		atlas-run detokenize -m "$m" <"$t/ids" >"$t/out"
		expect_same_file "$t/out" "$t/in"
	done
	expect_eq "$(od -An -tx1 "$t/out" | tr -d ' \n')" \
		"616263fffe2064656620c08020eda080207461696cf00a" "bytes"
}

@test "invalid UTF-8 in --jsonl output is escaped, not lost" {
	run -0 --separate-stderr sh -c 'printf "a\377b\n" | atlas-run tokenize |
		sed "s/ /, /g; s/.*/{\"ids\": [&]}/" | atlas-run detokenize --jsonl'
	expect_eq "$output" '{"text": "a\u00ffb"}' "jsonl"
}

@test "detokenize: an id outside the vocabulary names the id, exit 1" {
	run -1 --separate-stderr sh -c 'echo 5 99999 | atlas-run detokenize'
	expect_contains "$stderr" "99999" "stderr"
	expect_contains "$stderr" "vocabulary" "stderr"
	expect_contains "$stderr" "line 1" "stderr"
}

@test "detokenize --jsonl: an id outside the vocabulary names the id, exit 1" {
	run -1 --separate-stderr sh -c 'echo "{\"ids\": [5, 99999]}" | atlas-run detokenize --jsonl'
	expect_contains "$stderr" "99999" "stderr"
}

@test "generate: an id outside the vocabulary names the id, exit 1" {
	run -1 --separate-stderr sh -c 'echo 5 99999 | atlas-run generate -n 2'
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "99999" "stderr"
	expect_contains "$stderr" "vocabulary" "stderr"
	expect_contains "$stderr" "line 1" "stderr"
}

@test "generate: a negative id names the id, exit 1" {
	run --separate-stderr sh -c 'echo 5 -3 | atlas-run generate -n 2'
	expect_no_crash
	[ "$status" -eq 1 ]
	expect_contains "$stderr" "-3" "stderr"
}

@test "generate: a non-numeric word in the ids names it" {
	run -1 --separate-stderr sh -c 'echo 12 abc | atlas-run generate -n 2'
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "'abc'" "stderr"
	expect_contains "$stderr" "line 1" "stderr"
}

@test "detokenize: a non-numeric word in the ids names it and its line" {
	run -1 --separate-stderr sh -c 'printf "12 13\n12 abc\n" | atlas-run detokenize'
	expect_contains "$stderr" "'abc'" "stderr"
	expect_contains "$stderr" "line 2" "stderr"
	expect_eq "${#lines[@]}" 1 "lines before the bad one"
}

@test "generate --jsonl: a line that is not JSON is an error naming the line" {
	run -1 --separate-stderr sh -c 'echo 12 13 | atlas-run generate --jsonl -n 2'
	expect_contains "$stderr" "line 1" "stderr"
}

@test "a missing tokenizer.json: names the file" {
	local m
	m=$(model_copy "$DEFAULT_MODEL" notok)
	rm "$m/tokenizer.json"
	run -1 --separate-stderr atlas-run -m "$m" -p hi -n 2
	expect_contains "$stderr" "tokenizer.json" "stderr"
}
