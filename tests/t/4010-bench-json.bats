#!/usr/bin/env bats
# 4010-bench-json.bats - the JSON schema of atlas-bench is an interface:
# the exact top-level keys of each subcommand's --json output, and the
# parameters recorded (defaults included). A schema change must update
# this file.

load test_helper

setup() {
	export ATLAS_HOME=$BATS_TEST_TMPDIR/home
}

# top_keys JSON - the top-level keys, sorted, space-separated (the output
# is pretty-printed with two-space indentation).
top_keys() {
	sed -n 's/^  "\([a-z_0-9]*\)":.*/\1/p' <<<"$1" | sort | tr '\n' ' '
}

# param_keys JSON - the keys of "params".
param_keys() {
	awk '/^  "params":/ { p = 1; next } p && /^  [}]/ { exit } p' <<<"$1" |
		sed -n 's/^    "\([a-z_0-9]*\)":.*/\1/p' | sort | tr '\n' ' '
}

@test "kernels" {
	run -0 --separate-stderr atlas-bench kernels --device cpu --shape qwen3-0.6b --filter rmsnorm --tokens 1 --reps 1 --json
	expect_eq "$(top_keys "$output")" "ceilings command commit gates machine metrics params results time version " "keys"
	expect_eq "$(param_keys "$output")" "baseline context copy_size device filter gemm_n record reps seed shape threads thresholds_file tokens " "params"
}

@test "decode, prefill, generate" {
	for c in decode prefill generate; do
		run -0 --separate-stderr atlas-bench $c -m "$GOLDEN/qwen3" --prompt 4 --json
		expect_eq "$(top_keys "$output")" "ceilings command commit gates machine metrics model params profile results time version " "$c keys"
	done
	run -0 --separate-stderr atlas-bench decode -m "$GOLDEN/qwen3" --prompt 4 --json
	expect_eq "$(param_keys "$output")" "batch batch_invariant copy_size device gemm_n gen graphs kv_dtype model num_draft profile prompt record seed speculative synthetic threads thresholds_file tp warmup " "decode params"
	expect_contains "$output" '"speculative":"none"'
	expect_contains "$output" '"num_draft":null'
	expect_contains "$output" '"warmup":2'
	expect_contains "$output" '"tp":1'
	expect_contains "$output" '"driver_version":'
	expect_contains "$output" '"cuda_runtime_version":'
}

@test "serve" {
	run -0 --separate-stderr atlas-bench serve --self --prompt 4 --gen 2 --requests 1 --json
	expect_eq "$(top_keys "$output")" "command commit gates machine metrics params results server time version " "keys"
	expect_eq "$(param_keys "$output")" "api_key batch_invariant concurrency device draft_model gen kv_dtype model prompt record requests seed self served_model speculative threads thresholds_file timeout_s tp url vocab " "params"
}
