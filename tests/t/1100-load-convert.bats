#!/usr/bin/env bats
# 1100-load-convert.bats - atlas-load convert: sharded output with an
# index, dtypes, and that converted models load and generate (f32 exactly
# as the original).

load test_helper

@test "convert to f32 with small shards: index, configs copied, same greedy output" {
	local out=$BATS_TEST_TMPDIR/f32
	run -0 --separate-stderr atlas-load convert --dtype f32 --max-shard-size 100KB "$GOLDEN/qwen3" "$out"
	expect_eq "$output" "$out" "stdout"
	expect_match "$stderr" "in [0-9]+ shards$" "stderr"
	[ -f "$out/model.safetensors.index.json" ]
	[ ! -e "$out/model.safetensors" ]
	local n
	n=$(ls "$out"/model-*-of-*.safetensors | wc -l)
	[ "$n" -ge 5 ]
	ls "$out" | grep -q "model-00001-of-0000$n.safetensors"
	grep -q '"total_size": 722688' "$out/model.safetensors.index.json"
	grep -q '"model.norm.weight": "model-0000' "$out/model.safetensors.index.json"
	expect_same_file "$out/tokenizer.json" "$GOLDEN/qwen3/tokenizer.json"
	expect_same_file "$out/generation_config.json" "$GOLDEN/qwen3/generation_config.json"
	[ ! -e "$out/expected.json" ] && [ ! -e "$out/logits-0.bin" ]
	# no shard is larger than the limit unless one tensor alone is
	for f in "$out"/model-*.safetensors; do
		[ "$(wc -c <"$f")" -le 400000 ]
	done
	run -0 atlas-load validate "$out"
	run -0 atlas-run -m "$GOLDEN/qwen3" -p "Once upon a time" -n 16 --temperature 0 -q
	local want=$output
	run -0 atlas-run -m "$out" -p "Once upon a time" -n 16 --temperature 0 -q
	expect_eq "$output" "$want" "greedy output of the f32 conversion"
}

@test "convert to bf16: half the bytes, config dtype updated, loads and runs" {
	local out=$BATS_TEST_TMPDIR/bf16
	run -0 --separate-stderr atlas-load convert --dtype bf16 "$GOLDEN/qwen3" "$out"
	[ -f "$out/model.safetensors" ]
	[ ! -e "$out/model.safetensors.index.json" ]
	run -0 atlas-load inspect "$out"
	expect_match "$output" "^dtypes: +BF16 100.0%$" "dtypes"
	expect_match "$output" "\(361344\)$" "bytes"
	grep -q '"dtype": "bfloat16"' "$out/config.json"
	run -0 --separate-stderr atlas-run -m "$out" -p "Once upon a time" -n 8 --temperature 0 -q
	[ -n "$output" ]
}

@test "convert bf16 to f32 and f16 round-trips the bf16 values" {
	local a=$BATS_TEST_TMPDIR/a b=$BATS_TEST_TMPDIR/b
	run -0 atlas-load convert --dtype f32 "$GOLDEN/qwen3-bf16" "$a"
	run -0 atlas-load convert --dtype bf16 "$a" "$b"
	run -0 atlas-run -m "$GOLDEN/qwen3-bf16" -p "abc" -n 8 --temperature 0 -q
	local want=$output
	run -0 atlas-run -m "$b" -p "abc" -n 8 --temperature 0 -q
	expect_eq "$output" "$want" "bf16 -> f32 -> bf16"
	run -0 atlas-load convert --dtype f16 "$GOLDEN/qwen3-bf16" "$BATS_TEST_TMPDIR/h"
	run -0 atlas-load inspect "$BATS_TEST_TMPDIR/h"
	expect_match "$output" "^dtypes: +F16 100.0%$" "dtypes"
}

@test "convert refuses a non-empty output directory and a broken source" {
	mkdir -p "$BATS_TEST_TMPDIR/full"
	touch "$BATS_TEST_TMPDIR/full/x"
	run -1 --separate-stderr atlas-load convert --dtype bf16 "$GOLDEN/qwen3" "$BATS_TEST_TMPDIR/full"
	expect_contains "$stderr" "'$BATS_TEST_TMPDIR/full' is not empty"
	local m
	m=$(model_copy "$GOLDEN/qwen3" trunc)
	truncate -s 5000 "$m/model.safetensors"
	run -1 --separate-stderr atlas-load convert --dtype bf16 "$m" "$BATS_TEST_TMPDIR/o2"
	expect_contains "$stderr" "model.safetensors"
}
