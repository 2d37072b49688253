#!/usr/bin/env bats
# 3000-serve-basic.bats - atlas-serve's command line and every endpoint
# on the default model: chat completions, completions (text, ids, echo,
# logprobs), models, Anthropic messages, tokenize/detokenize, health,
# metrics, streaming framing, stop strings, the per-request log line.

load 3000-serve-helper

setup_file() {
	serve_start S --served-model-name tiny
}

teardown_file() {
	serve_stop S
}

@test "--help lists every flag; -V prints the version" {
	run -0 --separate-stderr atlas-serve --help
	expect_match "${lines[0]}" '^usage: atlas-serve ' "first line"
	for f in --model --served-model-name --device --ctx-size --threads --host --port \
		--api-key --api-key-file --max-body --max-seqs --max-batch-tokens --kv-blocks \
		--no-prefix-cache --verbose --help --version; do
		expect_contains "$output" "$f" "usage"
	done
	run -0 atlas-serve --version
	expect_match "$output" "^atlas-serve $(cat "$ATLAS_SRC/VERSION")( |\$)" "version"
}

@test "usage errors exit 2" {
	run -2 --separate-stderr atlas-serve --bogus
	expect_contains "$stderr" "--help" "stderr"
	run -2 --separate-stderr atlas-serve --port 70000
	expect_contains "$stderr" "--port" "stderr"
	run -2 --separate-stderr atlas-serve --max-seqs 8 --max-batch-tokens 4
	expect_contains "$stderr" "--max-batch-tokens" "stderr"
	run -2 --separate-stderr atlas-serve stray
	expect_contains "$stderr" "'stray'" "stderr"
	run -1 --separate-stderr atlas-serve --api-key-file /nonexistent/key
	expect_contains "$stderr" "cannot open '/nonexistent/key'" "stderr"
}

@test "binds 127.0.0.1 by default" {
	expect_contains "$(cat "$S_LOG")" "listening on http://127.0.0.1:" "log"
}

@test "GET /health is 200 when ready" {
	http GET "$S_URL/health"
	expect_eq "$status_code" 200
	expect_eq "$body" '{"status":"ok"}'
}

@test "GET /v1/models lists the served name; /v1/models/ID" {
	http GET "$S_URL/v1/models"
	expect_eq "$status_code" 200
	expect_contains "$body" '"object":"list"'
	expect_contains "$body" '"id":"tiny","object":"model"'
	expect_contains "$body" "\"max_model_len\":$(sed -n 's/.*"max_position_embeddings": \([0-9]*\).*/\1/p' "$ATLAS_SRC/models/default/config.json")"
	http GET "$S_URL/v1/models/tiny"
	expect_eq "$status_code" 200
	expect_contains "$body" '"id":"tiny"'
	http GET "$S_URL/v1/models/other"
	expect_error 404 model "'other' does not exist"
}

@test "POST /v1/completions: text equals atlas-run's greedy output" {
	line=$(printf '{"prompt": "Once upon a time"}\n' | atlas-run -q --jsonl -f - --temperature 0 -n 12 --ignore-eos)
	want=$(json_field "$line" text)
	http POST "$S_URL/v1/completions" '{"model":"tiny","prompt":"Once upon a time","max_tokens":12,"temperature":0,"ignore_eos":true,"unknown_field":{"x":1}}'
	expect_eq "$status_code" 200
	expect_contains "$body" '"object":"text_completion"'
	expect_contains "$body" '"model":"tiny"'
	expect_contains "$body" '"finish_reason":"length"'
	expect_contains "$body" '"usage":{"prompt_tokens":'
	expect_contains "$body" '"completion_tokens":12,'
	expect_eq "\"$(completion_text "$body")\"" "$want" "text (JSON-escaped)"
}

@test "POST /v1/completions: token-id prompt, echo, logprobs" {
	ids=$(printf 'Once upon a time' | atlas-run tokenize --whole | tr ' ' ',')
	http POST "$S_URL/v1/completions" "{\"prompt\":[$ids],\"max_tokens\":4,\"temperature\":0,\"echo\":true,\"logprobs\":2}"
	expect_eq "$status_code" 200
	expect_match "$(completion_text "$body")" '^Once upon a time' "echoed text"
	expect_contains "$body" '"logprobs":{"tokens":['
	expect_match "$body" '"token_logprobs":\[-?[0-9]' "token_logprobs"
	expect_contains "$body" '"text_offset":[16,'
	http POST "$S_URL/v1/completions" '{"prompt":["two","prompts"],"max_tokens":4}'
	expect_eq "$status_code" 200
	expect_contains "$body" '"index":1,"text":'
}

@test "POST /v1/chat/completions: message, usage, logprobs" {
	http POST "$S_URL/v1/chat/completions" '{"model":"tiny","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello"}],"max_tokens":6,"temperature":0,"ignore_eos":true,"logprobs":true,"top_logprobs":3}'
	expect_eq "$status_code" 200
	expect_contains "$body" '"object":"chat.completion"'
	expect_contains "$body" '"message":{"role":"assistant","content":"'
	expect_contains "$body" '"finish_reason":"length"'
	expect_contains "$body" '"completion_tokens":6'
	expect_contains "$body" '"logprobs":{"content":[{"token":'
	expect_contains "$body" '"top_logprobs":[{"token":'
	expect_match "$body" '"id":"chatcmpl-[0-9a-f]+"' "id"
}

@test "chat completions stream: role chunk, deltas, finish chunk, usage chunk, [DONE]" {
	out=$(curl -sN "$S_URL/v1/chat/completions" -H 'Content-Type: application/json' \
		-d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}')
	first=$(printf '%s\n' "$out" | sed -n 1p)
	expect_match "$first" '^data: \{"id":"chatcmpl-[0-9a-f]+","object":"chat.completion.chunk"' "first chunk"
	expect_contains "$first" '"delta":{"role":"assistant","content":""}' "first chunk"
	expect_eq "$(printf '%s\n' "$out" | sed -n 2p)" "" "blank line after a chunk"
	expect_contains "$out" '"delta":{},"logprobs":null,"finish_reason":"length"}],"usage":null}'
	expect_contains "$out" '"choices":[],"usage":{"prompt_tokens":'
	expect_eq "$(printf '%s\n' "$out" | grep -v '^$' | tail -1)" "data: [DONE]" "last event"
	# every non-blank line is an SSE data line
	expect_empty "$(printf '%s\n' "$out" | grep -v '^$' | grep -v '^data: ')" "other lines"
	# the deltas add up to the non-streamed content
	http POST "$S_URL/v1/chat/completions" '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0,"ignore_eos":true}'
	whole=$(printf '%s' "$body" | sed -n 's/.*"content":"\(\([^"\\]\|\\.\)*\)".*/\1/p')
	joined=$(printf '%s\n' "$out" | sed -n 's/.*"delta":{"content":"\(\([^"\\]\|\\.\)*\)"}.*/\1/p' | tr -d '\n')
	expect_eq "$joined" "$whole" "streamed content"
}

@test "completions stream without usage" {
	out=$(curl -sN "$S_URL/v1/completions" -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":3,"temperature":0,"ignore_eos":true,"stream":true}')
	expect_contains "$out" '"object":"text_completion"'
	expect_contains "$out" '"finish_reason":"length"'
	case $out in *'"usage"'*) false ;; esac
	expect_eq "$(printf '%s\n' "$out" | grep -v '^$' | tail -1)" "data: [DONE]"
}

@test "POST /v1/messages (Anthropic), not streamed" {
	http POST "$S_URL/v1/messages" '{"model":"tiny","system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"Hello"}]}],"max_tokens":4,"temperature":0,"ignore_eos":true}'
	expect_eq "$status_code" 200
	expect_match "$body" '^\{"id":"msg_[0-9a-f]+","type":"message","role":"assistant","model":"tiny","content":\[\{"type":"text","text":' "body"
	expect_contains "$body" '"stop_reason":"max_tokens","stop_sequence":null'
	expect_contains "$body" '"usage":{"input_tokens":'
	expect_contains "$body" '"output_tokens":4}'
}

@test "POST /v1/messages stream: the Anthropic event sequence" {
	out=$(curl -sN "$S_URL/v1/messages" -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"temperature":0,"ignore_eos":true,"stream":true}')
	events=$(printf '%s\n' "$out" | sed -n 's/^event: //p' | awk '!(last == $0 && $0 == "content_block_delta") { print } { last = $0 }' | tr '\n' ' ')
	expect_eq "$events" "message_start content_block_start ping content_block_delta content_block_stop message_delta message_stop " "events"
	expect_contains "$out" '"delta":{"type":"text_delta","text":'
	expect_contains "$out" '"delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"input_tokens":'
	expect_contains "$out" '"output_tokens":3}}'
	expect_contains "$out" 'data: {"type":"message_stop"}'
}

@test "stop strings cut the text; Anthropic names the stop sequence" {
	http POST "$S_URL/v1/completions" '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"ignore_eos":true}'
	full=$(completion_text "$body")
	stop=$(printf '%s' "$full" | cut -c 2)
	[ -n "$stop" ] && [ "$stop" != '\\' ] && [ "$stop" != '"' ]
	http POST "$S_URL/v1/completions" "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"stop\":[\"zzzz\",\"$stop\"]}"
	expect_contains "$body" '"finish_reason":"stop"'
	expect_eq "$(completion_text "$body")" "$(printf '%s' "$full" | cut -c 1)" "cut text"
	http POST "$S_URL/v1/messages" "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"stop_sequences\":[\"\\n\"]}"
	expect_eq "$status_code" 200
}

@test "POST /tokenize and /detokenize round-trip" {
	want=$(printf 'Hello world' | atlas-run tokenize --whole | tr ' ' ',')
	http POST "$S_URL/tokenize" '{"prompt":"Hello world"}'
	expect_eq "$status_code" 200
	expect_contains "$body" "\"tokens\":[$want]"
	expect_contains "$body" "\"max_model_len\":$(sed -n 's/.*"max_position_embeddings": \([0-9]*\).*/\1/p' "$ATLAS_SRC/models/default/config.json")"
	http POST "$S_URL/detokenize" "{\"tokens\":[$want]}"
	expect_eq "$status_code" 200
	expect_eq "$body" '{"prompt":"Hello world"}'
	http POST "$S_URL/detokenize" '{"tokens":[1,"x"]}'
	expect_error 400 tokens "list of token ids"
	http POST "$S_URL/detokenize" '{"tokens":[99999]}'
	expect_error 400 tokens "outside the vocabulary"
}

@test "GET /metrics: counters, histograms, gauges; one log line per request" {
	out=$(curl -s "$S_URL/metrics")
	for m in 'atlas_requests_total{status="200"}' atlas_generation_tokens_total \
		atlas_prompt_tokens_total 'atlas_time_to_first_token_seconds_bucket{le="+Inf"}' \
		atlas_time_per_output_token_seconds_count atlas_requests_running \
		atlas_requests_waiting atlas_kv_blocks_used atlas_kv_blocks_free; do
		expect_contains "$out" "$m " "metrics"
	done
	expect_contains "$out" '# TYPE atlas_time_to_first_token_seconds histogram'
	expect_eq "$(metric "$S_URL" atlas_requests_running)" 0
	expect_match "$(cat "$S_LOG")" '^atlas-serve: (chatcmpl-|cmpl-|msg_)[0-9a-f]+: prompt [0-9]+ tokens \([0-9]+ cached\), generated [0-9]+ tokens, ttft [0-9.]+ ms, total [0-9.]+ ms, finish (length|stop|eos)$' "log line"
}

@test "/health is 503 while the model loads" {
	export SERVE_NO_WAIT=1 ATLAS_SERVE_TEST_LOAD_DELAY_MS=1500
	serve_start L
	unset SERVE_NO_WAIT ATLAS_SERVE_TEST_LOAD_DELAY_MS
	http GET "$L_URL/health"
	expect_eq "$status_code" 503
	expect_eq "$body" '{"status":"loading"}'
	http POST "$L_URL/v1/completions" '{"prompt":"x"}'
	expect_error 503 "" "still loading"
	for i in $(seq 60); do
		http GET "$L_URL/health"
		[ "$status_code" = 200 ] && break
		sleep 0.1
	done
	expect_eq "$status_code" 200
	serve_stop L
}
