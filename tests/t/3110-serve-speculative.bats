#!/usr/bin/env bats
# 3110-serve-speculative.bats - atlas-serve --speculative ngram on the
# default model on the CPU, next to a server without it: greedy answers
# (text and logprobs) equal, streamed or not, under a grammar and with
# other requests in the step; the ready log line names the mode; the
# atlas_spec_* counters of /metrics count the drafts (0 without
# speculation); seeded sampling reproducible; bad --speculative and
# --num-draft values exit 2 before the port is bound.

load 3000-serve-helper

setup_file() {
	serve_start N --device cpu --max-seqs 4 --max-batch-tokens 64 --speculative ngram
	serve_start P --device cpu --max-seqs 4 --max-batch-tokens 64
}

teardown_file() {
	serve_stop N
	serve_stop P
}

# A prompt that repeats itself, as a JSON string body: its continuation
# has n-grams to look up (the default model then repeats a digit).
PROMPT='def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n'

SPEC_METRICS="atlas_spec_steps_total atlas_spec_draft_tokens_total atlas_spec_accepted_tokens_total atlas_spec_emitted_tokens_total"

# spec_counts URL - the four atlas_spec_* counters, space-separated.
spec_counts() {
	local m n
	m=$(curl -s "$1/metrics")
	for n in $SPEC_METRICS; do
		printf '%s\n' "$m" | awk -v n="$n" '$1 == n { print $2 }'
	done | paste -sd ' ' -
}

# complete URL EXTRA_JSON - a greedy completion of $PROMPT, 48 tokens;
# sets $status_code and $body.
complete() {
	http POST "$1/v1/completions" \
		"{\"prompt\":\"$PROMPT\",\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true$2}"
}

@test "--help, the man page and the completions list --speculative, --num-draft and the counters" {
	run -0 --separate-stderr atlas-serve --help
	expect_contains "$output" "--speculative MODE" "usage"
	expect_contains "$output" "none (default), ngram" "usage"
	expect_contains "$output" "--num-draft K" "usage"
	local man n
	man=$(cat "$ATLAS_SRC/man/atlas-serve.1")
	expect_contains "$man" '.BI \-\-speculative " MODE"' "man"
	expect_contains "$man" '.BI \-\-num\-draft " K"' "man"
	for n in $SPEC_METRICS; do
		expect_contains "$man" "\\fB${n}\\fR" "man"
	done
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-serve")" "--speculative" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-serve")" "--num-draft" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-serve")" "'none ngram draft mtp'" "bash values"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-serve")" "--speculative=" "zsh"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-serve")" "--num-draft=" "zsh"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-serve")" ":mode:(none ngram draft mtp)" "zsh values"
}

@test "bad --speculative and --num-draft values exit 2 before binding" {
	local args want
	while IFS='|' read -r args want; do
		# shellcheck disable=SC2086 # the arguments are words
		run -2 --separate-stderr timeout 30 atlas-serve --port 0 --device cpu $args
		expect_contains "$stderr" "$want" "stderr of $args"
		expect_contains "$stderr" "atlas-serve --help" "stderr of $args"
		[[ $stderr != *"listening on"* ]] || { echo "$args: bound: $stderr" >&2; false; }
	done <<'EOF'
--speculative mtp --draft-model x|--draft-model is for --speculative draft, not mtp
--speculative draft|--speculative draft needs --draft-model M
--speculative ngram --draft-model x|--draft-model is for --speculative draft, not ngram
--speculative bogus|--speculative: unknown speculative mode 'bogus' (none, ngram, draft, mtp)
--speculative ngram --num-draft 0|--num-draft: 0 is out of range (1..16)
--speculative ngram --num-draft 17|--num-draft: 17 is out of range (1..16)
--num-draft 4|--num-draft needs --speculative ngram
--speculative none --num-draft 2|--num-draft needs --speculative ngram
EOF
}

@test "the ready log line names the mode" {
	expect_match "$(cat "$N_LOG")" '^atlas-serve: model .* ready on cpu: .*, speculative ngram,' "N's ready line"
	expect_match "$(cat "$P_LOG")" '^atlas-serve: model .* ready on cpu: .*, speculative none,' "P's ready line"
}

@test "/metrics has the four atlas_spec_* counters on both servers" {
	local url m n
	for url in "$N_URL" "$P_URL"; do
		m=$(curl -s "$url/metrics")
		for n in $SPEC_METRICS; do
			expect_contains "$m" "# TYPE $n counter" "metrics of $url"
			expect_match "$m" "^$n [0-9]+\$" "metrics of $url"
		done
	done
}

@test "greedy: the same text and logprobs with drafts, atlas-run's text, and the counters grow" {
	local before after want first
	read -r -a before <<<"$(spec_counts "$N_URL")"
	complete "$N_URL" ',"logprobs":2'
	expect_eq "$status_code" 200 "HTTP status"
	expect_contains "$body" '"completion_tokens":48' "usage"
	expect_contains "$body" '"top_logprobs":[{' "logprobs"
	first=$(choices "$body")
	complete "$P_URL" ',"logprobs":2'
	expect_eq "$status_code" 200 "HTTP status"
	expect_eq "$first" "$(choices "$body")" "choices with and without drafts"
	# and what atlas-run prints for it, greedy
	want=$(printf '{"prompt": "%s"}\n' "$PROMPT" |
		atlas-run -q --jsonl -f - --device cpu --temperature 0 -n 48 --ignore-eos)
	expect_eq "\"$(completion_text "$body")\"" "$(json_field "$want" text)" "text (JSON-escaped)"
	# this prompt's drafts are proposed and kept; every step that verified
	# drafts emitted the kept ones and one more
	read -r -a after <<<"$(spec_counts "$N_URL")"
	local steps=$((after[0] - before[0])) drafted=$((after[1] - before[1]))
	local accepted=$((after[2] - before[2])) emitted=$((after[3] - before[3]))
	[ "$drafted" -gt 0 ] || { echo "atlas_spec_draft_tokens_total did not grow: ${after[*]}" >&2; false; }
	[ "$accepted" -gt 0 ] || { echo "no draft accepted: ${after[*]}" >&2; false; }
	[ "$accepted" -le "$drafted" ] || { echo "accepted $accepted > drafted $drafted" >&2; false; }
	expect_eq "$emitted" $((accepted + steps)) "atlas_spec_emitted_tokens_total growth"
	[ "$emitted" -le 48 ] || { echo "emitted $emitted > 48" >&2; false; }
	# without --speculative nothing is drafted
	expect_eq "$(spec_counts "$P_URL")" "0 0 0 0" "P's atlas_spec_* counters"
}

@test "a stream with drafts adds up to the answer" {
	local out whole joined
	out=$(curl -sN "$N_URL/v1/completions" -H 'Content-Type: application/json' \
		-d "{\"prompt\":\"$PROMPT\",\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}")
	expect_contains "$out" '"finish_reason":"length"' "stream"
	expect_eq "$(printf '%s\n' "$out" | grep -v '^$' | tail -1)" "data: [DONE]" "last event"
	joined=$(printf '%s\n' "$out" | sed -n 's/^data: .*"text":"\(\([^"\\]\|\\.\)*\)".*/\1/p' | tr -d '\n')
	complete "$P_URL"
	whole=$(completion_text "$body")
	expect_match "$whole" '[^[:space:]]' "text"
	expect_eq "$joined" "$whole" "streamed text"
}

@test "chat completions: the same answer with drafts" {
	local req a
	req="{\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true}"
	http POST "$N_URL/v1/chat/completions" "$req"
	expect_eq "$status_code" 200 "HTTP status"
	a=$(choices "$body")
	http POST "$P_URL/v1/chat/completions" "$req"
	expect_eq "$(choices "$body")" "$a" "choices with and without drafts"
}

@test "under a grammar (regex) the same answer, and drafts are still made" {
	local before after a
	before=$(metric "$N_URL" atlas_spec_draft_tokens_total)
	complete "$N_URL" ',"regex":"[0-9a-z =&()\\t]*"'
	expect_eq "$status_code" 200 "HTTP status"
	a=$(choices "$body")
	complete "$P_URL" ',"regex":"[0-9a-z =&()\\t]*"'
	expect_eq "$(choices "$body")" "$a" "choices with and without drafts"
	after=$(metric "$N_URL" atlas_spec_draft_tokens_total)
	[ "$after" -gt "$before" ] || { echo "no drafts under the grammar ($before, $after)" >&2; false; }
}

@test "seeded sampling with drafts is reproducible" {
	local req a
	req="{\"prompt\":\"$PROMPT\",\"max_tokens\":48,\"temperature\":0.8,\"seed\":3,\"ignore_eos\":true}"
	http POST "$N_URL/v1/completions" "$req"
	expect_eq "$status_code" 200 "HTTP status"
	a=$(choices "$body")
	expect_contains "$a" '"finish_reason":"length"' "choice"
	http POST "$N_URL/v1/completions" "$req"
	expect_eq "$(choices "$body")" "$a" "the same seed again"
}

@test "4 concurrent requests with drafts answer what each answers alone" {
	alone_vs_together "$N_URL" "$PROMPT" 24
}
