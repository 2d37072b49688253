#!/usr/bin/env bats
# 3040-serve-prefix-n.bats - several choices and prompts per request and
# the prefix cache through HTTP: n (1..16) on chat and completions,
# streamed and not, seeded choices (choice j samples with seed + j),
# lists of prompts (index = prompt * n + j), echo per choice;
# usage.prompt_tokens_details.cached_tokens, Anthropic's
# cache_read_input_tokens, the prefix-cache metrics, --no-prefix-cache;
# a prompt over the KV pool (400, no choice left running); a client that
# leaves an n = 4 stream cancels all four.

load 3000-serve-helper

setup_file() {
	serve_start S
	serve_start N --no-prefix-cache
	serve_start K --kv-blocks 4 --max-seqs 2 --max-batch-tokens 64
}

teardown_file() {
	serve_stop S
	serve_stop N
	serve_stop K
}

# choices JSON - one line per choice of a completions body: "INDEX TEXT"
# (TEXT JSON-escaped, without quotes), in the order of the body.
choices() {
	printf '%s\n' "$1" | sed 's/{"index":/\n{"index":/g' |
		sed -n 's/^{"index":\([0-9]*\),"text":"\(\([^"\\]\|\\.\)*\)".*/\1 \2/p'
}

# chat_choices JSON - the same for a chat body: "INDEX CONTENT".
chat_choices() {
	printf '%s\n' "$1" | sed 's/{"index":/\n{"index":/g' |
		sed -n 's/^{"index":\([0-9]*\),"message":{"role":"assistant","content":"\(\([^"\\]\|\\.\)*\)".*/\1 \2/p'
}

# usage_field JSON KEY - a number in the body's usage.
usage_field() {
	printf '%s\n' "$1" | sed -n 's/.*"usage":{.*"'"$2"'":\([0-9]*\).*/\1/p'
}

# message_content JSON - an Anthropic body from its content to its usage.
message_content() {
	printf '%s\n' "$1" | sed -n 's/.*\("content":.*\),"usage".*/\1/p'
}

# A prompt of about 300 tokens: long enough to fill many KV blocks.
long_prompt() {
	local i
	for i in $(seq 50); do
		printf 'Line %d of the long story about the sea. ' "$i"
	done
}

@test "n = 4 with a seed: 4 choices indexed 0..3, not all equal, the same again" {
	req='{"prompt":"Once upon a time","n":4,"temperature":1,"seed":11,"max_tokens":12,"ignore_eos":true}'
	http POST "$S_URL/v1/completions" "$req"
	expect_eq "$status_code" 200
	first=$(choices "$body")
	expect_eq "$(printf '%s\n' "$first" | cut -d' ' -f1 | tr '\n' ' ')" "0 1 2 3 " "indexes"
	[ "$(printf '%s\n' "$first" | cut -d' ' -f2- | sort -u | wc -l)" -ge 2 ]
	expect_contains "$body" '"completion_tokens":48,'
	http POST "$S_URL/v1/completions" "$req"
	expect_eq "$(choices "$body")" "$first" "the same request again"
	# chat too: choice j is the single request with seed + j
	http POST "$S_URL/v1/chat/completions" '{"messages":[{"role":"user","content":"Hi"}],"n":3,"temperature":1,"seed":20,"max_tokens":8,"ignore_eos":true}'
	expect_eq "$status_code" 200
	chat=$(chat_choices "$body")
	expect_eq "$(printf '%s\n' "$chat" | cut -d' ' -f1 | tr '\n' ' ')" "0 1 2 " "chat indexes"
	http POST "$S_URL/v1/chat/completions" '{"messages":[{"role":"user","content":"Hi"}],"temperature":1,"seed":22,"max_tokens":8,"ignore_eos":true}'
	expect_eq "$(chat_choices "$body" | cut -d' ' -f2-)" "$(printf '%s\n' "$chat" | sed -n 3p | cut -d' ' -f2-)" "choice 2 = seed + 2"
}

@test "n = 4 streamed: every index's deltas, a finish_reason each, one usage chunk, one [DONE]" {
	req='"messages":[{"role":"user","content":"Hi"}],"n":4,"temperature":1,"seed":3,"max_tokens":6,"ignore_eos":true'
	out=$(curl -sN "$S_URL/v1/chat/completions" -H 'Content-Type: application/json' -d "{$req,\"stream\":true,\"stream_options\":{\"include_usage\":true}}")
	http POST "$S_URL/v1/chat/completions" "{$req}"
	for i in 0 1 2 3; do
		expect_contains "$out" "{\"index\":$i,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}" "role chunk $i"
		expect_eq "$(printf '%s\n' "$out" | grep -c "\"index\":$i,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"")" 1 "finish chunks of $i"
		joined=$(printf '%s\n' "$out" | sed -n "s/.*{\"index\":$i,\"delta\":{\"content\":\"\\(\\([^\"\\\\]\\|\\\\.\\)*\\)\"}.*/\\1/p" | tr -d '\n')
		expect_eq "$joined" "$(chat_choices "$body" | sed -n "$((i + 1))p" | cut -d' ' -f2-)" "streamed text of $i"
	done
	expect_eq "$(printf '%s\n' "$out" | grep -c '"choices":\[\],"usage":{"prompt_tokens":')" 1 "usage chunks"
	expect_contains "$out" '"completion_tokens":24,'
	expect_eq "$(printf '%s\n' "$out" | grep -c '^data: \[DONE\]$')" 1 "[DONE] lines"
	expect_eq "$(printf '%s\n' "$out" | grep -v '^$' | tail -1)" "data: [DONE]" "last event"
	# completions: each choice's finish chunk
	out=$(curl -sN "$S_URL/v1/completions" -H 'Content-Type: application/json' -d '{"prompt":"Once","n":3,"max_tokens":3,"ignore_eos":true,"stream":true}')
	for i in 0 1 2; do
		expect_eq "$(printf '%s\n' "$out" | grep -c "{\"index\":$i,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"length\"}")" 1 "finish chunks of $i"
	done
	expect_eq "$(printf '%s\n' "$out" | grep -c '^data: \[DONE\]$')" 1 "[DONE] lines"
}

@test "n outside 1..16 is a 400 naming n" {
	for n in 0 17 -1; do
		http POST "$S_URL/v1/completions" "{\"prompt\":\"x\",\"n\":$n}"
		expect_error 400 n "'n' must be in [1, 16]"
		http POST "$S_URL/v1/chat/completions" "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":$n}"
		expect_error 400 n "'n' must be in [1, 16]"
	done
	http POST "$S_URL/v1/completions" '{"prompt":"x","n":2.5}'
	expect_error 400 n "'n' must be an integer"
	http POST "$S_URL/v1/completions" '{"prompt":"x","n":16,"max_tokens":1}'
	expect_eq "$status_code" 200
	expect_contains "$body" '"index":15,'
}

@test "a list of 2 prompts with n = 2: choice p*2+j is prompt p alone with seed + j" {
	http POST "$S_URL/v1/completions" '{"prompt":["Once upon a time","The sea"],"n":2,"temperature":1,"seed":40,"max_tokens":10,"ignore_eos":true}'
	expect_eq "$status_code" 200
	got=$(choices "$body")
	expect_eq "$(printf '%s\n' "$got" | cut -d' ' -f1 | tr '\n' ' ')" "0 1 2 3 " "indexes"
	# prompt tokens counted once per prompt
	p1=$(printf 'Once upon a time' | atlas-run tokenize --whole | wc -w)
	p2=$(printf 'The sea' | atlas-run tokenize --whole | wc -w)
	expect_contains "$body" "\"prompt_tokens\":$((p1 + p2)),\"completion_tokens\":40,"
	want=""
	for p in "Once upon a time" "The sea"; do
		for j in 0 1; do
			http POST "$S_URL/v1/completions" "{\"prompt\":\"$p\",\"temperature\":1,\"seed\":$((40 + j)),\"max_tokens\":10,\"ignore_eos\":true}"
			want="$want$(choices "$body" | cut -d' ' -f2-)
"
		done
	done
	expect_eq "$(printf '%s\n' "$got" | cut -d' ' -f2-)" "$(printf '%s' "$want")" "texts"
	http POST "$S_URL/v1/completions" '{"prompt":[],"max_tokens":2}'
	expect_error 400 prompt "empty"
	http POST "$S_URL/v1/completions" '{"prompt":["a",5],"max_tokens":2}'
	expect_error 400 prompt "'prompt[1]' must be"
	http POST "$S_URL/v1/completions" '{"prompt":["a","b"],"n":16,"max_tokens":2}'
	expect_eq "$status_code" 200
}

@test "a prompt list of token-id lists; echo per choice with its own prompt" {
	a=$(printf 'Once upon a time' | atlas-run tokenize --whole | tr ' ' ',')
	b=$(printf 'The sea' | atlas-run tokenize --whole | tr ' ' ',')
	http POST "$S_URL/v1/completions" "{\"prompt\":[[$a],[$b]],\"max_tokens\":5,\"temperature\":0,\"ignore_eos\":true}"
	expect_eq "$status_code" 200
	ids=$(choices "$body")
	http POST "$S_URL/v1/completions" '{"prompt":["Once upon a time","The sea"],"max_tokens":5,"temperature":0,"ignore_eos":true}'
	expect_eq "$(choices "$body")" "$ids" "ids and text prompts"
	http POST "$S_URL/v1/completions" "{\"prompt\":[[$a],\"The sea\"],\"n\":2,\"max_tokens\":5,\"temperature\":0,\"ignore_eos\":true,\"echo\":true}"
	expect_eq "$status_code" 200
	got=$(choices "$body")
	expect_match "$(printf '%s\n' "$got" | sed -n 1p)" '^0 Once upon a time' "choice 0"
	expect_match "$(printf '%s\n' "$got" | sed -n 2p)" '^1 Once upon a time' "choice 1"
	expect_match "$(printf '%s\n' "$got" | sed -n 3p)" '^2 The sea' "choice 2"
	expect_match "$(printf '%s\n' "$got" | sed -n 4p)" '^3 The sea' "choice 3"
	expect_eq "$(printf '%s\n' "$got" | sed -n 4p | cut -d' ' -f2-)" "The sea$(printf '%s\n' "$ids" | sed -n 2p | cut -d' ' -f2-)" "echo + text"
}

@test "cached_tokens: a repeated prompt is read from the prefix cache, the text unchanged" {
	req="{\"prompt\":\"$(long_prompt)\",\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true}"
	http POST "$S_URL/v1/completions" "$req"
	expect_eq "$status_code" 200
	expect_contains "$body" '"prompt_tokens_details":{"cached_tokens":'
	n_prompt=$(usage_field "$body" prompt_tokens)
	[ "$n_prompt" -ge 200 ]
	first=$(choices "$body")
	http POST "$S_URL/v1/completions" "$req"
	expect_eq "$(choices "$body")" "$first" "text of the repeat"
	cached=$(usage_field "$body" cached_tokens)
	[ "$cached" -gt 0 ] || { echo "cached_tokens $cached" >&2; false; }
	[ "$cached" -lt "$n_prompt" ]
}

@test "--no-prefix-cache: cached_tokens 0, the same text as with the cache" {
	req="{\"prompt\":\"$(long_prompt)\",\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true}"
	http POST "$S_URL/v1/completions" "$req"
	want=$(choices "$body")
	for i in 1 2; do
		http POST "$N_URL/v1/completions" "$req"
		expect_eq "$status_code" 200
		expect_eq "$(usage_field "$body" cached_tokens)" 0 "cached_tokens"
		expect_eq "$(choices "$body")" "$want" "text"
	done
	expect_eq "$(metric "$N_URL" atlas_prefix_cache_hit_tokens_total)" 0 "hits"
	expect_eq "$(metric "$N_URL" atlas_kv_blocks_cached)" 0 "cached blocks"
}

@test "/metrics: prefix-cache hit and miss counters, cached blocks gauge" {
	req="{\"prompt\":\"$(long_prompt) Again.\",\"max_tokens\":2,\"temperature\":0}"
	http POST "$S_URL/v1/completions" "$req"
	http POST "$S_URL/v1/completions" "$req"
	out=$(curl -s "$S_URL/metrics")
	expect_contains "$out" '# TYPE atlas_prefix_cache_hit_tokens_total counter'
	expect_contains "$out" '# TYPE atlas_prefix_cache_miss_tokens_total counter'
	expect_contains "$out" '# TYPE atlas_kv_blocks_cached gauge'
	[ "$(metric "$S_URL" atlas_prefix_cache_miss_tokens_total)" -gt 0 ]
	hits=$(metric "$S_URL" atlas_prefix_cache_hit_tokens_total)
	[ "$hits" -gt 0 ] || { echo "hits $hits" >&2; false; }
}

@test "Anthropic usage: cache_read_input_tokens, cache_creation_input_tokens" {
	http POST "$S_URL/v1/messages" '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":3,"temperature":0}'
	expect_eq "$status_code" 200
	expect_match "$body" '"usage":\{"input_tokens":[0-9]+,"cache_creation_input_tokens":0,"cache_read_input_tokens":[0-9]+,"output_tokens":[0-9]+\}' "usage"
	out=$(curl -sN "$S_URL/v1/messages" -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":3,"temperature":0,"stream":true}')
	expect_match "$out" '"type":"message_start".*"cache_read_input_tokens":0,' "message_start"
	expect_match "$out" '"type":"message_delta".*"cache_creation_input_tokens":0,"cache_read_input_tokens":[0-9]+,"output_tokens":[0-9]+\}' "message_delta"
}

@test "Anthropic: a repeated prompt reads from the cache; input + cache read = the prompt" {
	req="{\"messages\":[{\"role\":\"user\",\"content\":\"$(long_prompt) Tell me.\"}],\"max_tokens\":3,\"temperature\":0}"
	http POST "$N_URL/v1/messages" "$req"
	total=$(usage_field "$body" input_tokens)
	want=$(message_content "$body")
	http POST "$S_URL/v1/messages" "$req"
	http POST "$S_URL/v1/messages" "$req"
	input=$(usage_field "$body" input_tokens)
	read=$(usage_field "$body" cache_read_input_tokens)
	expect_eq "$((input + read))" "$total" "input + cache read"
	expect_eq "$(message_content "$body")" "$want" "message"
	[ "$read" -gt 0 ] || { echo "cache_read_input_tokens $read" >&2; false; }
}

@test "a prompt needing more KV blocks than the pool: 400 naming it; no choice left running" {
	long=$(printf 'word %.0s' $(seq 80))
	http POST "$K_URL/v1/completions" "{\"prompt\":\"$long\",\"max_tokens\":2}"
	expect_error 400 "" "than the pool's 4"
	expect_contains "$body" '"type":"invalid_request_error"'
	http POST "$K_URL/v1/chat/completions" "{\"messages\":[{\"role\":\"user\",\"content\":\"$long\"}],\"n\":3}"
	expect_error 400 "" "than the pool's 4"
	# the first prompt's choices were submitted, then released
	http POST "$K_URL/v1/completions" "{\"prompt\":[\"hi\",\"$long\"],\"n\":3,\"max_tokens\":500,\"ignore_eos\":true}"
	expect_error 400 "" "'prompt[1]': the prompt of"
	for i in $(seq 50); do
		[ "$(metric "$K_URL" atlas_requests_running)$(metric "$K_URL" atlas_requests_waiting)" = 00 ] && break
		sleep 0.05
	done
	expect_eq "$(metric "$K_URL" atlas_requests_running)" 0 "running"
	expect_eq "$(metric "$K_URL" atlas_requests_waiting)" 0 "waiting"
	expect_eq "$(metric "$K_URL" atlas_kv_blocks_used)" 0 "used blocks"
	# more choices than the pool holds at once still finish
	http POST "$K_URL/v1/completions" '{"prompt":"hi there","n":8,"max_tokens":20,"ignore_eos":true}'
	expect_eq "$status_code" 200
	expect_eq "$(choices "$body" | wc -l)" 8 "choices"
}

@test "a client that leaves an n = 4 stream cancels all four choices" {
	curl -sN --max-time 0.5 "$S_URL/v1/completions" -H 'Content-Type: application/json' \
		-d '{"prompt":"go on","n":4,"max_tokens":1000,"ignore_eos":true,"stream":true}' \
		>"$BATS_TEST_TMPDIR/partial" || true
	id=$(sed -n '1s/^data: {"id":"\([^"]*\)".*/\1/p' "$BATS_TEST_TMPDIR/partial")
	expect_match "$id" '^cmpl-' "id"
	for i in $(seq 50); do
		[ "$(metric "$S_URL" atlas_requests_running)" = 0 ] && break
		sleep 0.05
	done
	expect_eq "$(metric "$S_URL" atlas_requests_running)" 0 "running"
	expect_eq "$(metric "$S_URL" atlas_kv_blocks_used)" 0 "used blocks"
	for i in $(seq 20); do
		[ "$(grep -c "^atlas-serve: $id\\[[0-3]\\]: .*finish cancelled$" "$S_LOG")" = 4 ] && break
		sleep 0.05
	done
	expect_eq "$(grep -c "^atlas-serve: $id\\[[0-3]\\]: .*finish cancelled$" "$S_LOG")" 4 "cancelled choices"
}

@test "--no-prefix-cache is in --help, the man page and the completions" {
	run -0 atlas-serve --help
	expect_contains "$output" "--no-prefix-cache"
	expect_contains "$(cat "$ATLAS_SRC/man/atlas-serve.1")" 'no\-prefix\-cache'
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-serve")" "--no-prefix-cache"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-serve")" "--no-prefix-cache"
}
