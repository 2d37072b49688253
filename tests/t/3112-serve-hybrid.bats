#!/usr/bin/env bats
# 3112-serve-hybrid.bats - atlas-serve on a hybrid Gated-DeltaNet model
# (the qwen3_next golden fixture) on the CPU: prompts answered alone and
# four at once give the same choices; the prefix cache keeps snapshots
# of the recurrent state at block boundaries, so a repeated long prompt
# is read from the cache (cached_tokens) with the text and logprobs of
# the cold answer, and /metrics counts the snapshots and their memory;
# with --no-prefix-cache nothing is cached; n-gram speculation and the
# checkpoint's MTP head (--speculative mtp) give the plain text, the
# latter for a repeated long prompt read from the cache too.

load 3000-serve-helper

HY=$ATLAS_SRC/tests/fixtures/golden/qwen3-next-bf16

setup_file() {
	serve_start H --device cpu -m "$HY" --max-seqs 4
	serve_start HN --device cpu -m "$HY" --no-prefix-cache
	serve_start HS --device cpu -m "$HY" --speculative ngram
	serve_start HM --device cpu -m "$HY" --speculative mtp --num-draft 3
}

teardown_file() {
	serve_stop H
	serve_stop HN
	serve_stop HS
	serve_stop HM
}

usage_field() {
	printf '%s\n' "$1" | sed -n 's/.*"usage":{.*"'"$2"'":\([0-9]*\).*/\1/p'
}

long_prompt() {
	local i
	for i in $(seq 30); do
		printf 'line %d of the long story. ' "$i"
	done
}

@test "four prompts alone and at once: the same choices" {
	alone_vs_together "$H_URL" "the cat sat on the" 8
}

@test "a repeated long prompt: read from the cache, the cold answer's bytes" {
	local req first cached n_prompt
	req="{\"prompt\":\"$(long_prompt)\",\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":2}"
	http POST "$H_URL/v1/completions" "$req"
	expect_eq "$status_code" 200
	expect_eq "$(usage_field "$body" cached_tokens)" 0 "cold"
	n_prompt=$(usage_field "$body" prompt_tokens)
	[ "$n_prompt" -ge 100 ] || { echo "prompt_tokens $n_prompt" >&2; false; }
	first=$(choices "$body")
	http POST "$H_URL/v1/completions" "$req"
	expect_eq "$(choices "$body")" "$first" "warm text and logprobs"
	cached=$(usage_field "$body" cached_tokens)
	[ "$cached" -gt 0 ] && [ "$cached" -lt "$n_prompt" ] || { echo "cached $cached of $n_prompt" >&2; false; }
	expect_eq "$((cached % 16))" 0 "a whole number of blocks"
	[ "$(metric "$H_URL" atlas_prefix_snapshots)" -gt 0 ]
	[ "$(metric "$H_URL" atlas_prefix_snapshot_bytes)" -gt 0 ]
	expect_contains "$(curl -s "$H_URL/metrics")" '# TYPE atlas_prefix_snapshots gauge' "metrics"
	# the same without a prefix cache: the same bytes, nothing cached
	http POST "$HN_URL/v1/completions" "$req"
	expect_eq "$(choices "$body")" "$first" "no cache"
	http POST "$HN_URL/v1/completions" "$req"
	expect_eq "$(usage_field "$body" cached_tokens)" 0 "no cache, repeated"
	expect_eq "$(metric "$HN_URL" atlas_prefix_snapshots)" 0 "no snapshots"
	expect_eq "$(metric "$HN_URL" atlas_prefix_snapshot_bytes)" 0 "no snapshot memory"
}

@test "n-gram speculation: the plain text" {
	local req plain
	req='{"prompt":"the cat sat on the mat and the cat sat on the","max_tokens":24,"temperature":0,"ignore_eos":true}'
	http POST "$HN_URL/v1/completions" "$req"
	plain=$(choices "$body")
	http POST "$HS_URL/v1/completions" "$req"
	expect_eq "$status_code" 200
	expect_eq "$(choices "$body")" "$plain" "speculative"
	[ "$(metric "$HS_URL" atlas_spec_draft_tokens_total)" -gt 0 ]
}

@test "MTP speculation: the plain text, cold and from the cache" {
	local req plain long
	req='{"prompt":"the cat sat on the mat and the cat sat on the","max_tokens":24,"temperature":0,"ignore_eos":true}'
	http POST "$HN_URL/v1/completions" "$req"
	plain=$(choices "$body")
	http POST "$HM_URL/v1/completions" "$req"
	expect_eq "$status_code" 200
	expect_eq "$(choices "$body")" "$plain" "mtp"
	[ "$(metric "$HM_URL" atlas_spec_draft_tokens_total)" -gt 0 ]
	# the head's entries, from the model's hidden states: none from zeros
	[ "$(metric "$HM_URL" atlas_spec_mtp_entries_total)" -gt 10 ]
	expect_eq "$(metric "$HM_URL" atlas_spec_mtp_blind_entries_total)" 0 "blind entries"
	expect_match "$(cat "$HM_LOG")" 'speculative mtp,' "the ready line"
	req="{\"prompt\":\"$(long_prompt)\",\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}"
	http POST "$HN_URL/v1/completions" "$req"
	long=$(choices "$body")
	http POST "$HM_URL/v1/completions" "$req"
	expect_eq "$(choices "$body")" "$long" "cold"
	http POST "$HM_URL/v1/completions" "$req"
	expect_eq "$(choices "$body")" "$long" "warm"
	[ "$(usage_field "$body" cached_tokens)" -gt 0 ]
}
