#!/usr/bin/env bats
# 4040-bench-kv-dtype.bats - atlas-bench --kv-dtype: decode, prefill and
# generate on the shipped model (head_dim 64) with a quantized KV cache,
# the format in params.kv_dtype of the JSON ("auto" by default) and in the
# table's header; serve --self passes it to the server it starts; other
# commands, serve --url and unknown formats exit 1.

load test_helper

setup() {
	export ATLAS_HOME=$BATS_TEST_TMPDIR/home
}

@test "--help and the completions list --kv-dtype and its values" {
	run -0 --separate-stderr atlas-bench --help
	expect_contains "$output" "--kv-dtype FMT" "usage"
	expect_contains "$(cat "$ATLAS_SRC/man/atlas-bench.1")" '\-\-kv\-dtype' "man"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-bench")" "--kv-dtype" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-bench")" "auto bf16 fp8 q4" "bash values"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-bench")" "--kv-dtype=" "zsh"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-bench")" "(auto bf16 fp8 q4)" "zsh values"
}

@test "an unknown format, and commands without a model, exit 1 naming --kv-dtype" {
	run -1 --separate-stderr atlas-bench decode -m "$DEFAULT_MODEL" --kv-dtype q5
	expect_contains "$stderr" "--kv-dtype" "stderr"
	expect_contains "$stderr" "'q5'" "stderr"
	expect_contains "$stderr" "auto, bf16, fp8 or q4" "stderr"
	run -1 --separate-stderr atlas-bench kernels --kv-dtype fp8
	expect_contains "$stderr" "--kv-dtype is for decode, prefill, generate and serve --self" "kernels"
	run -1 --separate-stderr atlas-bench serve --url http://127.0.0.1:1 --kv-dtype fp8
	expect_contains "$stderr" "--kv-dtype is for decode, prefill, generate and serve --self" "--url"
}

@test "decode --kv-dtype q4: measured, recorded in the JSON and the header" {
	run -0 --separate-stderr atlas-bench decode -m "$DEFAULT_MODEL" --device cpu --prompt 4 \
		--gen 4 --kv-dtype q4 --no-record --json
	expect_contains "$output" '"kv_dtype":"q4"' "params"
	expect_contains "$output" '"tok_s":' "results"
	expect_match "$stderr" "^decode of .* on cpu, KV cache q4\$" "header"
}

@test "prefill and generate --kv-dtype fp8; the default records auto" {
	for c in prefill generate; do
		run -0 --separate-stderr atlas-bench $c -m "$DEFAULT_MODEL" --device cpu --prompt 4 \
			--gen 2 --kv-dtype fp8 --no-record --json
		expect_contains "$output" '"kv_dtype":"fp8"' "$c params"
		expect_contains "$stderr" ", KV cache fp8" "$c header"
	done
	run -0 --separate-stderr atlas-bench decode -m "$DEFAULT_MODEL" --device cpu --prompt 4 \
		--gen 2 --no-record --json
	expect_contains "$output" '"kv_dtype":"auto"' "default params"
	[[ $stderr != *"KV cache"* ]]
}

@test "a model whose head_dim the format cannot hold fails the harness" {
	run -1 --separate-stderr atlas-bench decode -m "$GOLDEN/mistral" --device cpu --prompt 4 \
		--gen 2 --kv-dtype q4 --no-record
	expect_contains "$stderr" "--kv-dtype q4" "stderr"
	expect_contains "$stderr" "head_dim" "stderr"
}

@test "serve --self --kv-dtype fp8: the server started here answers" {
	run -0 --separate-stderr atlas-bench serve --self --device cpu --prompt 4 --gen 2 \
		--requests 2 --kv-dtype fp8 --no-record --json
	expect_contains "$output" '"kv_dtype":"fp8"' "params"
	expect_contains "$output" '"errors":0' "errors"
	expect_contains "$stderr" "(started here), batch-invariant, KV cache fp8" "header"
}

@test "serve --self passes --kv-dtype on: a format the model refuses stops the server" {
	run -1 --separate-stderr atlas-bench serve --self -m "$GOLDEN/mistral" --device cpu \
		--prompt 4 --gen 2 --requests 1 --kv-dtype q4 --no-record
	expect_contains "$stderr" "atlas-serve exited before it was ready" "stderr"
	expect_contains "$stderr" "--kv-dtype q4" "stderr"
}
