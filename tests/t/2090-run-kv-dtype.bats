#!/usr/bin/env bats
# 2090-run-kv-dtype.bats - atlas-run --kv-dtype: the KV cache's format
# (auto, bf16, fp8, q4) on the shipped default model on the CPU (head_dim
# 64, which every format holds), the "KV cache:" log line that names it,
# and the refusals: an unknown format (exit 2) and a model whose head_dim
# the format cannot hold (exit 1). The quantized formats may change the
# text, so only that they generate is checked, not what.

load test_helper

PROMPT="Once upon a time"

# gen FMT - greedy tokens from the default model on the CPU with -v, the
# KV cache in FMT; bats' $output and $stderr are set.
gen() {
	run -0 --separate-stderr atlas-run --device cpu -v --kv-dtype "$1" \
		--temperature 0 --ignore-eos -n 8 -p "$PROMPT"
}

@test "--help, the man page and the completions list --kv-dtype and its values" {
	run -0 --separate-stderr atlas-run --help
	expect_contains "$output" "--kv-dtype FMT" "usage"
	for v in auto bf16 fp8 q4; do
		expect_contains "$output" "$v" "usage"
	done
	expect_contains "$(cat "$ATLAS_SRC/man/atlas-run.1")" '\-\-kv\-dtype' "man"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-run")" "--kv-dtype" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-run")" "auto bf16 fp8 q4" "bash values"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-run")" "--kv-dtype=" "zsh"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-run")" "(auto bf16 fp8 q4)" "zsh values"
}

@test "an unknown format exits 2 naming --kv-dtype and the formats" {
	run -2 --separate-stderr atlas-run --kv-dtype q5 -p hi
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "--kv-dtype" "stderr"
	expect_contains "$stderr" "'q5'" "stderr"
	expect_contains "$stderr" "auto, bf16, fp8 or q4" "stderr"
	expect_contains "$stderr" "atlas-run --help" "stderr"
	run -2 --separate-stderr atlas-run --kv-dtype FP8 -p hi
	expect_contains "$stderr" "'FP8'" "stderr"
	run -2 --separate-stderr atlas-run -p hi --kv-dtype
	expect_contains "$stderr" "kv-dtype" "stderr"
}

@test "auto (the default) is the activation type: F32 on the CPU" {
	run -0 --separate-stderr atlas-run --device cpu -v -n 2 -p "$PROMPT"
	expect_match "$stderr" "KV cache: [0-9]+ blocks of [0-9]+ tokens, F32 \(" "log"
	gen auto
	expect_match "$stderr" "KV cache: [0-9]+ blocks of [0-9]+ tokens, F32 \(" "log"
}

@test "fp8: generates, and the log names the format" {
	gen fp8
	expect_match "$output" '[^[:space:]]' "fp8 text"
	expect_match "$stderr" "KV cache: [0-9]+ blocks of [0-9]+ tokens, fp8 \(" "log"
	expect_match "$stderr" "$TIMING_RE" "timing"
	local first=$output
	gen fp8
	expect_eq "$output" "$first" "fp8 text, run again"
}

@test "q4: generates, and the log names the format" {
	gen q4
	expect_match "$output" '[^[:space:]]' "q4 text"
	expect_match "$stderr" "KV cache: [0-9]+ blocks of [0-9]+ tokens, q4 \(" "log"
	expect_contains "$stderr" "generated 8 tokens" "timing"
}

@test "bf16: generates, and the log names the format" {
	gen bf16
	expect_match "$output" '[^[:space:]]' "bf16 text"
	expect_match "$stderr" "KV cache: [0-9]+ blocks of [0-9]+ tokens, bf16 \(" "log"
}

@test "the quantized caches take fewer bytes than the F32 one" {
	local f32 fp8 q4
	gen auto
	f32=$(printf '%s\n' "$stderr" | sed -n 's/.*KV cache: .*(\([0-9]*\) MiB).*/\1/p')
	gen fp8
	fp8=$(printf '%s\n' "$stderr" | sed -n 's/.*KV cache: .*(\([0-9]*\) MiB).*/\1/p')
	gen q4
	q4=$(printf '%s\n' "$stderr" | sed -n 's/.*KV cache: .*(\([0-9]*\) MiB).*/\1/p')
	[ -n "$f32" ] && [ -n "$fp8" ] && [ -n "$q4" ]
	[ "$fp8" -lt "$f32" ] || { echo "fp8 $fp8 MiB, f32 $f32 MiB" >&2; false; }
	[ "$q4" -le "$fp8" ] || { echo "q4 $q4 MiB, fp8 $fp8 MiB" >&2; false; }
}

@test "many prompts at once (-f --jsonl) run with a quantized cache" {
	printf '{"prompt": "%s"}\n' "$PROMPT" "The cat" "Hello" >"$BATS_TEST_TMPDIR/p.jsonl"
	run -0 --separate-stderr atlas-run --device cpu --kv-dtype q4 --temperature 0 \
		--ignore-eos -n 4 --jsonl -f "$BATS_TEST_TMPDIR/p.jsonl"
	expect_eq "${#lines[@]}" 3 "output lines"
	for l in "${lines[@]}"; do
		expect_eq "$(json_field "$l" completion_tokens)" 4 "completion_tokens"
	done
	expect_contains "$stderr" "3 prompts (0 failed)" "summary"
}

@test "a model whose head_dim the format cannot hold is refused at load" {
	# the golden mistral model has head_dim 8: no q4 (a power of two of 64 or more)
	run -1 --separate-stderr atlas-run -m "$GOLDEN/mistral" --device cpu --kv-dtype q4 -n 2 -p hi
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "atlas-run: error: " "stderr"
	expect_contains "$stderr" "--kv-dtype q4" "stderr"
	expect_contains "$stderr" "head_dim" "stderr"
}
