#!/usr/bin/env bats
# 4050-bench-spec.bats - atlas-bench serve --self --speculative: the flag
# reaches the server, the rows gain the acceptance rate and tokens per
# step from the server's atlas_spec_* counters, and the flags are refused
# where they do not apply (exit 1, as every bad atlas-bench flag).

load test_helper

setup() {
	export ATLAS_HOME=$BATS_TEST_TMPDIR/home
}

@test "--help, the man page and the completions list --speculative and --num-draft" {
	run -0 --separate-stderr atlas-bench --help
	expect_contains "$output" "--speculative MODE" "usage"
	expect_contains "$output" "--num-draft K" "usage"
	expect_contains "$output" "--draft-model M" "usage"
	expect_contains "$(cat "$ATLAS_SRC/man/atlas-bench.1")" '\-\-speculative' "man"
	expect_contains "$(cat "$ATLAS_SRC/man/atlas-bench.1")" 'spec_tok_per_step' "man"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-bench")" "--num-draft" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-bench")" '"none ngram draft mtp"' "bash values"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-bench")" "--draft-model" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-bench")" "--draft-model=" "zsh"
	expect_contains "$(cat "$ATLAS_SRC/man/atlas-bench.1")" '\-\-draft\-model' "man"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-bench")" "--speculative=" "zsh"
}

@test "serve --self --speculative ngram: acceptance and tokens per step in the table and JSON" {
	run -0 --separate-stderr atlas-bench serve --self --speculative ngram --num-draft 4 \
		--prompt 48 --gen 24 --requests 2 --vocab 40 --max errors=0 --json
	expect_contains "$stderr" "spec_accept_rate"
	expect_contains "$stderr" "spec_tok_per_step"
	expect_contains "$output" '"speculative":"ngram"'
	expect_match "$output" '"spec_drafted":[1-9]' "drafts proposed"
	expect_match "$output" '"spec_tok_per_step":[1-9]' "at least one token a step"
	# without it: no such columns, the mode recorded as none
	run -0 --separate-stderr atlas-bench serve --self --prompt 8 --gen 4 --requests 1 --json
	[[ $stderr != *spec_accept_rate* ]]
	expect_contains "$output" '"speculative":"none"'
	[[ $output != *'"spec_drafted"'* ]]
}

@test "serve --self --draft-model: the server drafts with it, params.draft_model says so" {
	local dm=$ATLAS_SRC/models/default
	run -0 --separate-stderr atlas-bench serve --self --draft-model "$dm" --num-draft 3 \
		--prompt 48 --gen 24 --requests 2 --vocab 40 --max errors=0 --json
	expect_contains "$stderr" "spec_accept_rate"
	expect_contains "$output" '"speculative":"draft"'
	expect_contains "$output" "\"draft_model\":\"$dm\""
	expect_match "$output" '"spec_drafted":[1-9]' "drafts proposed"
	expect_match "$output" '"spec_accepted":[1-9]' "drafts accepted"
}

@test "serve --self -m HYBRID --speculative mtp: the checkpoint's head drafts" {
	run -0 --separate-stderr atlas-bench serve --self -m "$ATLAS_SRC/tests/fixtures/golden/qwen3-next-bf16" \
		--speculative mtp --num-draft 2 --prompt 32 --gen 16 --requests 2 --vocab 40 \
		--max errors=0 --json
	expect_contains "$stderr" "spec_accept_rate"
	expect_contains "$output" '"speculative":"mtp"'
	expect_match "$output" '"spec_drafted":[1-9]' "drafts proposed"
}

@test "decode --speculative mtp: what a speculative step costs, in the table and JSON" {
	run -0 --separate-stderr atlas-bench decode -m "$ATLAS_SRC/tests/fixtures/golden/qwen3-next-bf16" \
		--device cpu --speculative mtp --num-draft 3 --prompt 16 --gen 4 --json
	expect_match "$stderr" 'speculative \(mtp, 3 drafts, 16-token prompt\): a step [0-9.]+ ms, verifying 1 \+ 3 rows [0-9.]+ ms, the head [0-9.]+ ms; pays above [0-9.]+ tokens a step' "table"
	expect_match "$output" '"num_draft":3' "params"
	expect_match "$output" '"breakeven_tokens_per_step":[0-9]' "breakeven"
	expect_match "$output" '"head_ms":[0-9]' "head"
	# the tokens a step to break even are the step's cost over the plain step's
	local ok
	ok=$(printf '%s\n' "$output" | tr -d ' ,' | awk -F: '
		/^"step_ms"/ { s = $2 } /^"spec_ms"/ { t = $2 } /^"breakeven_tokens_per_step"/ { b = $2 }
		END { d = b * s - t; if (d < 0) d = -d; print (s > 0 && d < 1e-6 * t) ? "yes" : "no" }')
	expect_eq "$ok" "yes" "breakeven = spec_ms / step_ms"
	# a checkpoint without a head, another mode, prefill: refused
	run -1 --separate-stderr atlas-bench decode -m "$ATLAS_SRC/models/default" --device cpu \
		--speculative mtp --prompt 8 --gen 2
	expect_contains "$stderr" "no mtp.fc.weight"
	run -1 --separate-stderr atlas-bench decode --speculative ngram -m "$ATLAS_SRC/models/default"
	expect_contains "$stderr" "decode --speculative mtp"
	run -1 --separate-stderr atlas-bench prefill --speculative mtp -m "$ATLAS_SRC/models/default"
	expect_contains "$stderr" "decode --speculative mtp"
}

@test "bad --speculative and --num-draft uses exit 1 and name the fault" {
	run -1 --separate-stderr atlas-bench serve --self --speculative mtp --draft-model x
	expect_contains "$stderr" "--draft-model is for --speculative draft, not mtp"
	run -1 --separate-stderr atlas-bench serve --self --speculative fast
	expect_contains "$stderr" "unknown speculative mode 'fast'"
	run -1 --separate-stderr atlas-bench serve --self --num-draft 3
	expect_contains "$stderr" "--num-draft needs --speculative ngram"
	run -1 --separate-stderr atlas-bench serve --self --speculative ngram --num-draft 17
	expect_contains "$stderr" "--num-draft"
	run -1 --separate-stderr atlas-bench serve --url http://127.0.0.1:9 --speculative ngram
	expect_contains "$stderr" "--speculative, --draft-model and --num-draft are for serve --self"
	run -1 --separate-stderr atlas-bench decode --synthetic qwen3-0.6b --speculative ngram
	expect_contains "$stderr" "--speculative, --draft-model and --num-draft are for serve --self"
	run -1 --separate-stderr atlas-bench decode --synthetic qwen3-0.6b --draft-model x
	expect_contains "$stderr" "--speculative, --draft-model and --num-draft are for serve --self"
	run -1 --separate-stderr atlas-bench serve --self --speculative draft
	expect_contains "$stderr" "--speculative draft needs --draft-model M"
	run -1 --separate-stderr atlas-bench serve --self --speculative ngram --draft-model x
	expect_contains "$stderr" "--draft-model is for --speculative draft, not ngram"
}
