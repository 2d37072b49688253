#!/usr/bin/env bats
# 3111-serve-draft-model.bats - atlas-serve --draft-model M (speculative
# decoding with a draft model) on the CPU, the default model drafting for
# itself, next to a server without drafts: greedy answers (text and
# logprobs) equal, streamed or not, under a grammar and with other
# requests in the step; every draft accepted (the draft model is the
# model, its penalties applied); the ready log line names the draft
# model; a draft model with another tokenizer is refused before the
# server is ready.

load 3000-serve-helper

setup_file() {
	serve_start D --device cpu --max-seqs 4 --max-batch-tokens 64 \
		--draft-model "$ATLAS_SRC/models/default"
	serve_start P --device cpu --max-seqs 4 --max-batch-tokens 64
}

teardown_file() {
	serve_stop D
	serve_stop P
}

PROMPT='def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef add(a, b):\n'

# complete URL EXTRA_JSON - a greedy completion of $PROMPT, 40 tokens.
complete() {
	http POST "$1/v1/completions" \
		"{\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true$2}"
}

@test "--help, the man page and the completions list --draft-model" {
	run -0 --separate-stderr atlas-serve --help
	expect_contains "$output" "--draft-model M" "usage"
	expect_contains "$(cat "$ATLAS_SRC/man/atlas-serve.1")" '.BI \-\-draft\-model " M"' "man"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-serve")" "--draft-model" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-serve")" "--draft-model=" "zsh"
}

@test "the ready log line names the draft model" {
	expect_match "$(cat "$D_LOG")" "^atlas-serve: model .* ready on cpu: .*, speculative draft with draft model $ATLAS_SRC/models/default," "D's ready line"
}

@test "greedy: the same text and logprobs with drafts, and every draft is accepted" {
	local b0 b1 a0 a1 first
	b0=$(metric "$D_URL" atlas_spec_draft_tokens_total)
	b1=$(metric "$D_URL" atlas_spec_accepted_tokens_total)
	complete "$D_URL" ',"logprobs":2'
	expect_eq "$status_code" 200 "HTTP status"
	expect_contains "$body" '"completion_tokens":40' "usage"
	first=$(choices "$body")
	complete "$P_URL" ',"logprobs":2'
	expect_eq "$(choices "$body")" "$first" "choices with and without drafts"
	a0=$(metric "$D_URL" atlas_spec_draft_tokens_total)
	a1=$(metric "$D_URL" atlas_spec_accepted_tokens_total)
	[ "$a0" -gt "$b0" ] || { echo "no drafts ($b0, $a0)" >&2; false; }
	expect_eq $((a1 - b1)) $((a0 - b0)) "accepted drafts"
	expect_eq "$(metric "$P_URL" atlas_spec_draft_tokens_total)" 0 "P's drafts"
}

@test "a stream with drafts adds up to the answer" {
	local out joined
	out=$(curl -sN "$D_URL/v1/completions" -H 'Content-Type: application/json' \
		-d "{\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}")
	expect_eq "$(printf '%s\n' "$out" | grep -v '^$' | tail -1)" "data: [DONE]" "last event"
	joined=$(printf '%s\n' "$out" | sed -n 's/^data: .*"text":"\(\([^"\\]\|\\.\)*\)".*/\1/p' | tr -d '\n')
	complete "$P_URL"
	expect_match "$(completion_text "$body")" '[^[:space:]]' "text"
	expect_eq "$joined" "$(completion_text "$body")" "streamed text"
}

@test "under a grammar (regex) the same answer, drafts made inside it and all accepted" {
	local b0 b1 a0 a1 a
	b0=$(metric "$D_URL" atlas_spec_draft_tokens_total)
	b1=$(metric "$D_URL" atlas_spec_accepted_tokens_total)
	complete "$D_URL" ',"regex":"[0-9a-z =&()\\t]*"'
	expect_eq "$status_code" 200 "HTTP status"
	a=$(choices "$body")
	complete "$P_URL" ',"regex":"[0-9a-z =&()\\t]*"'
	expect_eq "$(choices "$body")" "$a" "choices with and without drafts"
	a0=$(metric "$D_URL" atlas_spec_draft_tokens_total)
	a1=$(metric "$D_URL" atlas_spec_accepted_tokens_total)
	[ "$a0" -gt "$b0" ] || { echo "no drafts under the grammar ($b0, $a0)" >&2; false; }
	expect_eq $((a1 - b1)) $((a0 - b0)) "accepted drafts"
}

@test "seeded sampling: the same answer with drafts as without" {
	local req a
	req="{\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0.8,\"seed\":3,\"ignore_eos\":true}"
	http POST "$D_URL/v1/completions" "$req"
	expect_eq "$status_code" 200 "HTTP status"
	a=$(choices "$body")
	http POST "$P_URL/v1/completions" "$req"
	expect_eq "$(choices "$body")" "$a" "choices with and without drafts"
}

@test "4 concurrent requests with drafts answer what each answers alone" {
	alone_vs_together "$D_URL" "$PROMPT" 20
}

@test "a draft model with another tokenizer: the server exits 1 naming it" {
	local dm=$ATLAS_SRC/models/default other=$BATS_TEST_TMPDIR/other f
	mkdir "$other"
	for f in config.json generation_config.json model.safetensors tokenizer_config.json; do
		ln -s "$dm/$f" "$other/$f"
	done
	sed 's/"Ġis": 300,/"Ġis": 301,/; s/"ic": 301,/"ic": 300,/' "$dm/tokenizer.json" \
		>"$other/tokenizer.json"
	run -1 --separate-stderr timeout 60 atlas-serve --port 0 --device cpu --draft-model "$other"
	expect_contains "$stderr" "tokenizer differs from the model's at id 300" "stderr"
}
