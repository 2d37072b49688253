#!/usr/bin/env bats
# 3010-serve-errors.bats - every error atlas-serve answers, in OpenAI's
# shape {"error": {"message", "type", "param", "code"}} (Anthropic's
# {"type": "error", "error": {...}} on /v1/messages): malformed JSON,
# wrong types naming the field, n outside 1..16, prompt over the context, unknown
# route, wrong method, body over --max-body, API keys.

load 3000-serve-helper

setup_file() {
	printf 'sekrit-key\n' >"$BATS_FILE_TMPDIR/key"
	serve_start E -c 64 --max-body 4096 --api-key-file "$BATS_FILE_TMPDIR/key"
}

teardown_file() {
	serve_stop E
}

AUTH=(-H 'Authorization: Bearer sekrit-key')

@test "401 without a key, with a wrong key; x-api-key works; /health needs none" {
	http POST "$E_URL/v1/completions" '{"prompt":"x","max_tokens":1}'
	expect_error 401 "" "API key"
	expect_contains "$body" '"type":"authentication_error"'
	http POST "$E_URL/v1/completions" '{"prompt":"x","max_tokens":1}' -H 'Authorization: Bearer sekrit-kez'
	expect_error 401 "" "API key"
	http POST "$E_URL/v1/completions" '{"prompt":"x","max_tokens":1}' -H 'Authorization: Bearer sekrit-key-longer'
	expect_eq "$status_code" 401
	http POST "$E_URL/v1/completions" '{"prompt":"x","max_tokens":1}' -H 'x-api-key: sekrit-key'
	expect_eq "$status_code" 200
	http GET "$E_URL/v1/models" "" "${AUTH[@]}"
	expect_eq "$status_code" 200
	http GET "$E_URL/health"
	expect_eq "$status_code" 200
}

@test "400 malformed JSON" {
	http POST "$E_URL/v1/chat/completions" '{"messages": [' "${AUTH[@]}"
	expect_error 400 "" "malformed JSON"
	http POST "$E_URL/v1/completions" '{"prompt":"x"} trailing' "${AUTH[@]}"
	expect_error 400 "" "malformed JSON"
	http POST "$E_URL/v1/completions" '[1,2]' "${AUTH[@]}"
	expect_error 400 "" "must be a JSON object"
	http POST "$E_URL/v1/completions" '' "${AUTH[@]}" -H 'Content-Length: 0'
	expect_error 400 "" "empty"
}

@test "400 wrong types name the field" {
	for f in '"temperature":"hot"' '"max_tokens":1.5' '"top_p":[1]' '"seed":"x"' \
		'"stream":"yes"' '"stop":5' '"top_k":0.5' '"presence_penalty":{}'; do
		name=$(printf '%s' "$f" | sed 's/^"\([a-z_]*\)".*/\1/')
		http POST "$E_URL/v1/completions" "{\"prompt\":\"x\",$f}" "${AUTH[@]}"
		expect_error 400 "$name" "'$name' must be"
	done
	http POST "$E_URL/v1/chat/completions" '{"messages":"hi"}' "${AUTH[@]}"
	expect_error 400 messages "'messages' must be a list"
	http POST "$E_URL/v1/chat/completions" '{"messages":[{"role":1,"content":"x"}]}' "${AUTH[@]}"
	expect_error 400 messages "role"
	http POST "$E_URL/v1/chat/completions" '{"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":"y"}}' "${AUTH[@]}"
	expect_error 400 stream_options.include_usage "must be a boolean"
	http POST "$E_URL/v1/completions" '{"prompt":{"a":1}}' "${AUTH[@]}"
	expect_error 400 prompt "'prompt' must be"
}

@test "400 values out of range, missing fields, n outside 1..16" {
	http POST "$E_URL/v1/completions" '{"prompt":"x","n":17}' "${AUTH[@]}"
	expect_error 400 n "'n' must be in [1, 16]"
	http POST "$E_URL/v1/chat/completions" '{"messages":[{"role":"user","content":"x"}],"n":0}' "${AUTH[@]}"
	expect_error 400 n "'n' must be in [1, 16]"
	http POST "$E_URL/v1/completions" '{"prompt":"x","temperature":-1}' "${AUTH[@]}"
	expect_error 400 temperature "'temperature' must be in"
	http POST "$E_URL/v1/completions" '{"prompt":"x","max_tokens":0}' "${AUTH[@]}"
	expect_error 400 max_tokens "at least 1"
	http POST "$E_URL/v1/completions" '{"max_tokens":3}' "${AUTH[@]}"
	expect_error 400 prompt "'prompt' is required"
	http POST "$E_URL/v1/chat/completions" '{"max_tokens":3}' "${AUTH[@]}"
	expect_error 400 messages "'messages' is required"
	http POST "$E_URL/v1/completions" '{"prompt":[5,99999]}' "${AUTH[@]}"
	expect_error 400 prompt "outside the vocabulary"
}

@test "400 when the prompt is longer than the context" {
	long=$(printf 'word %.0s' $(seq 100))
	http POST "$E_URL/v1/completions" "{\"prompt\":\"$long\",\"max_tokens\":2}" "${AUTH[@]}"
	expect_error 400 "" "more than the context of 64"
	expect_contains "$body" '"code":"context_length_exceeded"'
	http POST "$E_URL/v1/chat/completions" "{\"messages\":[{\"role\":\"user\",\"content\":\"$long\"}]}" "${AUTH[@]}"
	expect_error 400 "" "more than the context of 64"
	# a prompt that fits generates until the context is full
	http POST "$E_URL/v1/completions" '{"prompt":"word word","max_tokens":500,"temperature":0,"ignore_eos":true}' "${AUTH[@]}"
	expect_eq "$status_code" 200
	expect_contains "$body" '"finish_reason":"length"'
	expect_contains "$body" '"total_tokens":65,'
}

@test "Anthropic errors: its shape, max_tokens required, text blocks only" {
	http POST "$E_URL/v1/messages" '{"messages":[{"role":"user","content":"x"}]}' "${AUTH[@]}"
	expect_error 400 max_tokens "'max_tokens' is required"
	expect_match "$body" '^\{"type":"error","error":\{' "anthropic shape"
	http POST "$E_URL/v1/messages" '{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}' "${AUTH[@]}"
	expect_error 400 messages "'image' are not supported"
	http POST "$E_URL/v1/messages" '{"max_tokens":2,"messages":[{"role":"system","content":"x"}]}' "${AUTH[@]}"
	expect_error 400 messages "'user' or 'assistant'"
	http POST "$E_URL/v1/messages" '{"max_tokens":2,"messages":[{"role":"user","content":"x"}]}'
	expect_eq "$status_code" 401
	expect_contains "$body" '"type":"error"'
}

@test "404 unknown route, 405 wrong method" {
	http GET "$E_URL/v1/nothing" "" "${AUTH[@]}"
	expect_error 404 "" "no route for GET '/v1/nothing'"
	http POST "$E_URL/v2/chat/completions" '{}' "${AUTH[@]}"
	expect_eq "$status_code" 404
	http GET "$E_URL/v1/chat/completions" "" "${AUTH[@]}"
	expect_error 405 "" "method GET is not allowed on '/v1/chat/completions' (use POST)"
	http DELETE "$E_URL/v1/models" "" "${AUTH[@]}"
	expect_error 405 "" "not allowed"
	http POST "$E_URL/health" '{}'
	expect_eq "$status_code" 405
}

@test "413 when the body is over --max-body; the server keeps working" {
	big=$(head -c 5000 /dev/zero | tr '\0' 'a')
	http POST "$E_URL/v1/completions" "{\"prompt\":\"$big\"}" "${AUTH[@]}"
	expect_error 413 "" "over the limit of 4096"
	# chunked upload (no Content-Length) is cut off too
	status_code=$(printf '{"prompt":"%s"}' "$big" | curl -s -o "$BATS_TEST_TMPDIR/b" -w '%{http_code}' \
		-H 'Transfer-Encoding: chunked' -H 'Authorization: Bearer sekrit-key' -H 'Content-Type: application/json' \
		--data-binary @- "$E_URL/v1/completions")
	expect_eq "$status_code" 413
	http POST "$E_URL/v1/completions" '{"prompt":"x","max_tokens":1}' "${AUTH[@]}"
	expect_eq "$status_code" 200
}

@test "metrics count answers by status" {
	out=$(curl -s "${AUTH[@]}" "$E_URL/metrics")
	for s in 200 400 401 404 405 413; do
		expect_match "$out" "^atlas_requests_total\\{status=\"$s\"\\} [1-9]" "status $s"
	done
}
