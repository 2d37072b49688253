#!/usr/bin/env bats
# 1110-load-hardening.bats - atlas-load on checkpoints that lie: tensor
# names with a NUL byte or written twice are refused naming the file,
# and a convert that fails midway leaves no output directory behind.

load test_helper

# st_file PATH HEADER - a safetensors file with that JSON header and 64
# zero bytes of data (the length prefix written with printf's octal).
st_file() {
	local n=${#2} i le=""
	for i in 0 1 2 3 4 5 6 7; do
		le="$le\\$(printf '%03o' $(((n >> (8 * i)) & 255)))"
	done
	{
		printf "$le"
		printf '%s' "$2"
		head -c 64 /dev/zero
	} >"$1"
}

# model_with HEADER - a copy of the default model whose weights are
# replaced by a file with HEADER; prints its path.
model_with() {
	local m
	m=$(model_copy "$DEFAULT_MODEL" "m$RANDOM")
	st_file "$m/model.safetensors" "$1"
	printf '%s\n' "$m"
}

T='{"dtype":"F32","shape":[1],"data_offsets":'

@test "a tensor name with a NUL byte is refused, naming the file" {
	local m
	m=$(model_with "{\"a\\u0000b\":$T[0,4]}}")
	local msg="'$m/model.safetensors': tensor name 'a\\u0000b' has a NUL byte"
	run -1 --separate-stderr atlas-load inspect "$m"
	expect_contains "$stderr" "$msg"
	run -1 --separate-stderr atlas-load validate "$m"
	expect_contains "$output" "problem: $msg"
}

@test "a tensor name written twice is refused, naming the file" {
	local m
	m=$(model_with "{\"w\":$T[0,4]},\"w\":$T[4,8]}}")
	run -1 --separate-stderr atlas-load inspect "$m"
	expect_contains "$stderr" "'$m/model.safetensors': tensor name 'w' appears more than once"
	m=$(model_with "{\"w\":$T[0,4]},\"\\u0077\":$T[4,8]}}")
	run -1 --separate-stderr atlas-load inspect "$m"
	expect_contains "$stderr" "tensor name 'w' appears more than once"
}

@test "convert failing after the shards leaves no output directory" {
	local m out=$BATS_TEST_TMPDIR/outs/converted
	m=$(model_copy "$GOLDEN/qwen3" unreadable-tok)
	rm "$m/tokenizer.json"
	mkdir "$m/tokenizer.json" # reading it fails: the last step of convert
	run -1 --separate-stderr atlas-load convert --dtype bf16 "$m" "$out"
	expect_contains "$stderr" "tokenizer.json"
	[ ! -e "$out" ]
	expect_empty "$(ls "$BATS_TEST_TMPDIR/outs")" "leftovers"
	m=$(model_copy "$GOLDEN/qwen3" bad-config)
	printf '{"model_type": ' >"$m/config.json"
	run -1 --separate-stderr atlas-load convert --dtype bf16 "$m" "$out"
	expect_contains "$stderr" "config.json"
	[ ! -e "$out" ]
	expect_empty "$(ls "$BATS_TEST_TMPDIR/outs")" "leftovers"
}
