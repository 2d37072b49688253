#!/usr/bin/env bats
# 4000-bench-basic.bats - atlas-bench on a machine without a GPU: help,
# version, usage errors (exit 2) and the clean failure (exit 1) when no
# GPU can run the synthetic benchmarks.

load test_helper

@test "--help, -h, --version" {
	run -0 --separate-stderr atlas-bench --help
	expect_match "${lines[0]}" '^usage: atlas-bench decode ' "first line"
	for f in --synthetic --batch --prompt --gen --warmup --reps --device --seed \
		--copy-size --gemm-n --profile --no-graphs --json --quiet --help --version; do
		expect_contains "$output" "$f" "usage"
	done
	for s in qwen3-0.6b qwen3-8b qwen3-32b llama3-8b; do
		expect_contains "$output" "$s" "shapes"
	done
	local long=$output
	run -0 atlas-bench -h
	expect_eq "$output" "$long" "-h"
	run -0 atlas-bench --version
	expect_match "$output" "^atlas-bench $(cat "$ATLAS_SRC/VERSION")( |\$)" "version"
}

@test "usage errors exit 2 and name the fault" {
	run -2 --separate-stderr atlas-bench
	expect_contains "$stderr" "missing command"
	run -2 --separate-stderr atlas-bench bogus --synthetic qwen3-8b
	expect_contains "$stderr" "'bogus'"
	run -2 --separate-stderr atlas-bench decode
	expect_contains "$stderr" "--synthetic"
	run -2 --separate-stderr atlas-bench decode --synthetic gpt-9
	expect_contains "$stderr" "'gpt-9'"
	expect_contains "$stderr" "qwen3-8b"
	run -2 --separate-stderr atlas-bench decode --synthetic qwen3-8b --batch 1,0
	expect_contains "$stderr" "--batch"
	run -2 --separate-stderr atlas-bench decode --synthetic qwen3-8b --batch 1,x
	expect_contains "$stderr" "--batch"
	run -2 --separate-stderr atlas-bench prefill --synthetic qwen3-8b --batch 8
	expect_contains "$stderr" "--batch"
	run -2 --separate-stderr atlas-bench decode --synthetic qwen3-8b --prompt 128,256
	expect_contains "$stderr" "--prompt"
	run -2 --separate-stderr atlas-bench decode --synthetic qwen3-8b --gen 0
	expect_contains "$stderr" "--gen"
	run -2 --separate-stderr atlas-bench decode --synthetic qwen3-8b --copy-size lots
	expect_contains "$stderr" "--copy-size"
	run -2 --separate-stderr atlas-bench decode --synthetic qwen3-8b --bogus
	expect_contains "$stderr" "--bogus"
	run -2 --separate-stderr atlas-bench decode --synthetic qwen3-8b extra
	expect_contains "$stderr" "'extra'"
}

@test "no GPU: exit 1 with a message, nothing on stdout" {
	if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
		skip "this machine has a GPU"
	fi
	run -1 --separate-stderr atlas-bench decode --synthetic qwen3-0.6b --json
	expect_eq "$output" "" "stdout"
	expect_match "$stderr" "^atlas-bench: error: .*(GPU|CUDA|cuda)" "message"
	run -1 --separate-stderr atlas-bench prefill --synthetic qwen3-8b --device cpu
	expect_contains "$stderr" "needs a GPU"
	run -1 --separate-stderr atlas-bench decode --synthetic qwen3-8b --device cuda:3
	expect_eq "$output" "" "stdout"
}
