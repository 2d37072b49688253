#!/usr/bin/env bats
# 3090-serve-invariant.bats - the batch-invariance mode of atlas-serve:
# on by default, off with --no-batch-invariant, shown in the ready log
# line and as the gauge atlas_batch_invariant in /metrics, which
# atlas-bench serve --url records; a server without it still answers.
# (That answers under load equal answers alone, logprobs included, is
# 3020's.)

load 3000-serve-helper

setup_file() {
	serve_start D --max-seqs 4 --max-batch-tokens 32
	serve_start F --max-seqs 4 --max-batch-tokens 32 --no-batch-invariant
}

teardown_file() {
	serve_stop D
	serve_stop F
}

@test "--help and the completions list --no-batch-invariant" {
	run -0 --separate-stderr atlas-serve --help
	expect_contains "$output" "--no-batch-invariant" "usage"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-serve")" "--no-batch-invariant" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-serve")" "--no-batch-invariant" "zsh"
	expect_contains "$(cat "$ATLAS_SRC/man/atlas-serve.1")" '\-\-no\-batch\-invariant' "man"
}

@test "batch-invariant by default: the gauge says 1, the log says so" {
	expect_eq "$(metric "$D_URL" atlas_batch_invariant)" 1 "atlas_batch_invariant"
	expect_contains "$(curl -s "$D_URL/metrics")" "# TYPE atlas_batch_invariant gauge" "type"
	expect_contains "$(cat "$D_LOG")" "tokens per step, batch-invariant," "ready line"
}

@test "--no-batch-invariant: the gauge says 0, and it still answers" {
	expect_eq "$(metric "$F_URL" atlas_batch_invariant)" 0 "atlas_batch_invariant"
	expect_contains "$(cat "$F_LOG")" "tokens per step, not batch-invariant," "ready line"
	http POST "$F_URL/v1/completions" '{"prompt":"Once upon a time","max_tokens":6,"temperature":0,"ignore_eos":true,"logprobs":2}'
	expect_eq "$status_code" 200 "HTTP status"
	expect_contains "$body" '"finish_reason":"length"' "finish"
	expect_contains "$body" '"completion_tokens":6' "usage"
	expect_contains "$body" '"top_logprobs":[' "logprobs"
	[ -n "$(completion_text "$body")" ]
}

@test "atlas-bench serve --url records the mode the server reports" {
	export ATLAS_HOME=$BATS_TEST_TMPDIR/home
	run -0 --separate-stderr atlas-bench serve --url "$F_URL" --prompt 4 --gen 2 --requests 1 \
		--no-record --json
	expect_contains "$output" '"batch_invariant":null' "params: not asked"
	expect_contains "$output" '"batch_invariant":false' "server: reported"
	expect_contains "$stderr" "$F_URL, not batch-invariant" "header"
}
