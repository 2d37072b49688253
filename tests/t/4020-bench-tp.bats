#!/usr/bin/env bats
# 4020-bench-tp.bats - atlas-bench --tp N: decode, prefill and generate
# (a golden model and a synthetic shape) on N thread ranks of the CPU,
# "tp" in the recorded parameters, serve --self passing --tp to the
# server it starts, and the refusals (other commands, bad N, CUDA with
# fewer GPUs than N).

load test_helper

setup() {
	export ATLAS_HOME=$BATS_TEST_TMPDIR/home
}

@test "decode, prefill, generate --tp 2 on a golden model: measured, tp recorded" {
	for c in decode prefill generate; do
		run -0 --separate-stderr atlas-bench $c -m "$GOLDEN/qwen3" --device cpu --tp 2 \
			--prompt 4 --gen 2 --min tok_s=0.001 --json
		expect_contains "$output" '"tp":2' "$c params"
		expect_contains "$output" '"pass":true' "$c gate"
		expect_contains "$stderr" "on cpu (2 tensor-parallel thread ranks)" "$c table"
	done
	run -0 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3" --device cpu --tp 4 \
		--batch 1,2 --prompt 4 --gen 2 --json
	expect_contains "$output" '"tp":4'
	[ "$(grep -c '"floor_ms":' <<<"$output")" -eq 2 ]
}

@test "decode --tp 2 on a synthetic shape" {
	run -0 --separate-stderr atlas-bench decode --synthetic qwen3-0.6b --device cpu --tp 2 \
		--prompt 4 --gen 2 --warmup 0 --no-record --json
	expect_contains "$output" '"tp":2'
	expect_contains "$output" '"synthetic":"qwen3-0.6b"'
}

@test "serve --self --tp passes --tp to the server" {
	run -0 --separate-stderr atlas-bench serve --self --tp 2 --prompt 4 --gen 2 --requests 2 \
		--max errors=0 --json
	expect_contains "$output" '"tp":2'
	expect_contains "$output" '"errors":0'
	# the server really got it: 3 ranks do not divide the shipped model's heads
	run -1 --separate-stderr atlas-bench serve --self --tp 3 --prompt 4 --gen 2 --requests 1 \
		--timeout 60
	expect_contains "$stderr" "to be a multiple of 3"
}

@test "--tp: other commands, bad values and CUDA without the GPUs exit 1" {
	run -1 --separate-stderr atlas-bench kernels --device cpu --tp 2
	expect_contains "$stderr" "--tp is for decode, prefill, generate and serve --self"
	run -1 --separate-stderr atlas-bench serve --url http://127.0.0.1:1 --tp 2
	expect_contains "$stderr" "--tp is for decode, prefill, generate and serve --self"
	for v in 0 x 257; do
		run -1 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3" --tp "$v"
		expect_contains "$stderr" "--tp: '$v' is not an integer in 1..256" "--tp $v"
	done
	run -1 --separate-stderr env LD_LIBRARY_PATH=/nonexistent atlas-bench decode \
		--synthetic qwen3-0.6b --device cuda --tp 2
	expect_contains "$stderr" "--tp 2 needs 2 GPUs, but this machine has 0"
	run -1 --separate-stderr env LD_LIBRARY_PATH=/nonexistent atlas-bench serve --self \
		--device cuda --tp 2
	expect_contains "$stderr" "--tp 2 needs 2 GPUs, but this machine has 0"
	[ ! -d "$ATLAS_HOME/runs" ] || [ -z "$(ls "$ATLAS_HOME/runs")" ]
}
