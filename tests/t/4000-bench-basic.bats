#!/usr/bin/env bats
# 4000-bench-basic.bats - atlas-bench on the CPU backend: help, the exit
# codes (0 measured, 1 harness failure or bad flags, 2 a gate missed),
# kernels with a filter, decode/prefill/generate on a golden model, serve
# --self on the shipped model (also --no-batch-invariant), and the history
# of recorded runs.

load test_helper

setup() {
	export ATLAS_HOME=$BATS_TEST_TMPDIR/home
}

@test "--help, -h, --version" {
	run -0 --separate-stderr atlas-bench --help
	expect_match "${lines[0]}" '^usage: atlas-bench kernels ' "first line"
	for f in --model --synthetic --shape --filter --device --tokens --reps --batch --prompt \
		--gen --url --self --concurrency --requests --timeout --min --max --thresholds \
		--json --no-record --quiet --tp --no-batch-invariant --batch-invariant --help --version; do
		expect_contains "$output" "$f" "usage"
	done
	local long=$output
	run -0 atlas-bench -h
	expect_eq "$output" "$long" "-h"
	run -0 atlas-bench --version
	expect_match "$output" "^atlas-bench $(cat "$ATLAS_SRC/VERSION")( |\$)" "version"
}

@test "bad flags and names exit 1 and name the fault" {
	run -1 --separate-stderr atlas-bench
	expect_contains "$stderr" "missing command"
	run -1 --separate-stderr atlas-bench bogus
	expect_contains "$stderr" "'bogus'"
	run -1 --separate-stderr atlas-bench decode --bogus
	expect_contains "$stderr" "'--bogus'"
	expect_contains "$stderr" "--batch"
	run -1 --separate-stderr atlas-bench decode
	expect_contains "$stderr" "--synthetic"
	run -1 --separate-stderr atlas-bench decode --synthetic gpt-9
	expect_contains "$stderr" "'gpt-9'"
	expect_contains "$stderr" "qwen3-8b"
	run -1 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3" --batch 1,0
	expect_contains "$stderr" "--batch"
	run -1 --separate-stderr atlas-bench prefill -m "$GOLDEN/qwen3" --batch 8
	expect_contains "$stderr" "--batch"
	run -1 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3" --min speed=3
	expect_contains "$stderr" "'speed'"
	expect_contains "$stderr" "tok_s, ms_per_step"
	run -1 --separate-stderr atlas-bench serve --self --max ttft=3
	expect_contains "$stderr" "ttft_p50_ms"
	run -1 --separate-stderr atlas-bench kernels --copy-size lots
	expect_contains "$stderr" "--copy-size"
	run -1 --separate-stderr atlas-bench serve
	expect_contains "$stderr" "--url"
	run -1 --separate-stderr atlas-bench serve --url http://127.0.0.1:1 --no-batch-invariant
	expect_contains "$stderr" "--no-batch-invariant is for serve --self"
	run -1 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3" --no-batch-invariant
	expect_contains "$stderr" "--no-batch-invariant is for serve --self"
	run -1 --separate-stderr atlas-bench serve --self --batch-invariant
	expect_contains "$stderr" "--batch-invariant is for decode, prefill and generate"
	echo '{"tok_s": "fast"}' >"$BATS_TEST_TMPDIR/t.json"
	run -1 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3" --thresholds "$BATS_TEST_TMPDIR/t.json"
	expect_contains "$stderr" "t.json"
	run -1 --separate-stderr atlas-bench kernels --device cpu --shape qwen3-0.6b --filter nosuchop
	expect_contains "$stderr" "'nosuchop'"
	expect_eq "$output" "" "stdout"
}

@test "serve: an unreachable server exits 1 with nothing recorded" {
	run -1 --separate-stderr atlas-bench serve --url http://127.0.0.1:1 --json
	expect_eq "$output" "" "stdout"
	expect_contains "$stderr" "cannot reach 'http://127.0.0.1:1'"
	[ ! -d "$ATLAS_HOME/runs" ] || [ -z "$(ls "$ATLAS_HOME/runs")" ]
}

@test "kernels on the CPU with a filter" {
	run -0 --separate-stderr atlas-bench kernels --device cpu --shape qwen3-0.6b \
		--filter matmul --tokens 1,4 --reps 2 --json
	expect_contains "$stderr" "ceilings: copy"
	expect_contains "$output" '"op":"matmul"'
	expect_contains "$output" '"what":"gate/up"'
	[ "$(grep -c '"op":' <<<"$output")" -eq 10 ] # 5 matmuls x 2 token counts
	! grep -q '"op":"attention"' <<<"$output"
	expect_contains "$output" '"copy_gbs":'
	expect_contains "$output" '"gpu":"none"'
}

@test "decode, prefill and generate on a golden model; gates exit 0 or 2" {
	run -0 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3" --batch 1,2 --prompt 8 \
		--gen 4 --min tok_s=1 --max ms_per_step=60000 --json
	[ "$(grep -c '"floor_ms":' <<<"$output")" -eq 2 ]
	expect_contains "$output" '"pass":true'
	run -2 --separate-stderr atlas-bench prefill -m "$GOLDEN/qwen3" --prompt 8,16 \
		--min tok_s=1e15
	expect_contains "$stderr" "gate missed: tok_s >= 1e+15"
	echo '{"tok_s": 1, "ttft_ms": {"max": 0.000001}}' >"$BATS_TEST_TMPDIR/t.json"
	run -2 --separate-stderr atlas-bench generate -m "$GOLDEN/qwen3" --prompt 4 --gen 2,3 \
		--thresholds "$BATS_TEST_TMPDIR/t.json" --json
	expect_contains "$stderr" "gate missed: ttft_ms <="
	expect_contains "$output" '"e2e_tok_s":'
	[ "$(grep -c '"e2e_tok_s":[0-9]' <<<"$output")" -eq 2 ]
}

@test "serve --self on the default model at concurrency 2" {
	run -0 --separate-stderr atlas-bench serve --self --concurrency 1,2 --prompt 8 --gen 4 \
		--requests 4 --min throughput_tok_s=0.1 --max errors=0 --json
	expect_contains "$stderr" "(started here)"
	expect_contains "$output" '"concurrency":2'
	expect_contains "$output" '"errors":0'
	expect_contains "$output" '"tokens":16'
	expect_contains "$output" '"ttft_p99_ms":'
}

@test "serve --self --no-batch-invariant: passed to the server, mode recorded" {
	run -0 --separate-stderr atlas-bench serve --self --no-batch-invariant --prompt 4 --gen 2 \
		--requests 1 --max errors=0 --json
	# asked for (params) and reported by the server's gauge (server)
	[ "$(grep -c '"batch_invariant":false' <<<"$output")" -eq 2 ]
	expect_contains "$stderr" "(started here), not batch-invariant"
	run -0 --separate-stderr atlas-bench serve --self --prompt 4 --gen 2 --requests 1 --json
	[ "$(grep -c '"batch_invariant":true' <<<"$output")" -eq 2 ]
	expect_contains "$stderr" "(started here), batch-invariant"
}

@test "history lists and shows recorded runs" {
	run -0 atlas-bench history
	expect_eq "$output" "" "empty history"
	run -0 --separate-stderr atlas-bench kernels --device cpu --shape qwen3-0.6b --filter add_rmsnorm --tokens 1 --reps 1
	id=$(sed -n 's/^recorded as //p' <<<"$stderr")
	expect_match "$id" '^[0-9]{8}T[0-9]{6}Z-kernels$' "run id"
	[ -f "$ATLAS_HOME/runs/$id.json" ]
	run -2 --separate-stderr atlas-bench kernels --device cpu --shape qwen3-0.6b --filter add_rmsnorm --tokens 1 --reps 1 --min roofline=1e9
	run -0 atlas-bench kernels --device cpu --shape qwen3-0.6b --filter add --tokens 1 --reps 1 --no-record -q
	run -0 atlas-bench history
	[ "${#lines[@]}" -eq 2 ]
	expect_match "${lines[0]}" "^$id +kernels +cpu +none " "first line"
	expect_match "${lines[1]}" "FAIL 1/1\$" "gate failure shown"
	run -0 atlas-bench history show "$id"
	expect_contains "$output" '"command":"kernels"'
	expect_contains "$output" '"op":"add_rmsnorm"'
	run -1 --separate-stderr atlas-bench history show 1999
	expect_contains "$stderr" "no run '1999'"
}

@test "decode --batch-invariant: the server's kernels, mode recorded" {
	run -0 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3" --prompt 4 --gen 2 \
		--batch-invariant --json --no-record
	expect_contains "$output" '"batch_invariant":true'
	expect_contains "$stderr" ", batch-invariant"
	run -0 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3" --prompt 4 --gen 2 --json --no-record
	expect_contains "$output" '"batch_invariant":false'
	! grep -q "batch-invariant" <<<"$stderr"
}

@test "serve --self sizes the server's context for the longest request" {
	# 600 + 4 tokens: more than a fixed 512-token context holds
	run -0 --separate-stderr atlas-bench serve --self --prompt 600 --gen 4 --requests 1 --json --no-record
	expect_contains "$output" '"tokens":4,'
	expect_contains "$output" '"errors":0,'
}
