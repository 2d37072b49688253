#!/usr/bin/env bats
# 3060-serve-detokenize.bats - POST /detokenize answers valid JSON
# whatever the ids decode to: bytes that are not UTF-8 (half of a
# character split across tokens) become U+FFFD in "prompt", and
# "bytes_base64": true adds the exact bytes. The default model's
# byte-level vocabulary: "é" is the ids 127 (0xC3) and 102 (0xA9).

load 3000-serve-helper

setup_file() {
	serve_start D -c 64
}

teardown_file() {
	serve_stop D
}

# The last body must be UTF-8 (iconv refuses anything else).
expect_utf8_body() {
	printf '%s' "$body" | iconv -f UTF-8 -t UTF-8 >/dev/null && return 0
	echo "the reply is not UTF-8:" >&2
	printf '%s' "$body" | od -c | head -5 >&2
	return 1
}

@test "half a character becomes U+FFFD and the reply stays UTF-8" {
	http POST "$D_URL/detokenize" '{"tokens": [66, 1358, 127]}'
	expect_eq "$status_code" 200
	expect_utf8_body
	expect_eq "$body" "{\"prompt\":\"caf$(printf '\357\277\275')\"}"
	http POST "$D_URL/detokenize" '{"tokens": [102, 127]}'
	expect_utf8_body
	expect_eq "$body" "{\"prompt\":\"$(printf '\357\277\275\357\277\275')\"}"
}

@test "bytes_base64 carries the exact bytes" {
	http POST "$D_URL/detokenize" '{"tokens": [66, 1358, 127], "bytes_base64": true}'
	expect_eq "$status_code" 200
	expect_utf8_body
	expect_contains "$body" '"bytes_base64":"Y2Fmww=="'
	b64=$(printf '%s' "$body" | sed -n 's/.*"bytes_base64":"\([^"]*\)".*/\1/p')
	expect_eq "$(printf '%s' "$b64" | base64 -d | od -An -tx1 | tr -d ' \n')" 636166c3 "bytes"
	http POST "$D_URL/detokenize" '{"tokens": [66, 1358, 127, 102], "bytes_base64": true}'
	expect_eq "$body" "{\"prompt\":\"caf$(printf '\303\251')\",\"bytes_base64\":\"Y2Fmw6k=\"}"
	http POST "$D_URL/detokenize" '{"tokens": [], "bytes_base64": true}'
	expect_eq "$body" '{"prompt":"","bytes_base64":""}'
	http POST "$D_URL/detokenize" '{"tokens": [127], "bytes_base64": false}'
	expect_eq "$body" "{\"prompt\":\"$(printf '\357\277\275')\"}"
}

@test "tokenize then detokenize gives the text back" {
	http POST "$D_URL/tokenize" "{\"prompt\": \"caf$(printf '\303\251') \\u20ac\", \"add_special_tokens\": false}"
	expect_eq "$status_code" 200
	ids=$(printf '%s' "$body" | sed -n 's/.*"tokens":\(\[[^]]*\]\).*/\1/p')
	http POST "$D_URL/detokenize" "{\"tokens\": $ids}"
	expect_eq "$body" "{\"prompt\":\"caf$(printf '\303\251 \342\202\254')\"}"
}

@test "400 for a bytes_base64 that is not a boolean, and for bad ids" {
	http POST "$D_URL/detokenize" '{"tokens": [1], "bytes_base64": "yes"}'
	expect_error 400 bytes_base64 "'bytes_base64' must be a boolean"
	http POST "$D_URL/detokenize" '{"tokens": [1, "x"]}'
	expect_error 400 tokens "must be a list of token ids"
	http POST "$D_URL/detokenize" '{"tokens": [99999999]}'
	expect_error 400 tokens "outside the vocabulary"
	http POST "$D_URL/detokenize" '{}'
	expect_error 400 tokens "'tokens' is required"
}

@test "the man page documents U+FFFD and bytes_base64" {
	man=$(cat "$ATLAS_SRC/man/atlas-serve.1")
	expect_contains "$man" 'U+FFFD' "man page"
	expect_contains "$man" '"bytes_base64": true' "man page"
	expect_contains "$man" '"Y2Fmww=="' "man page example (as the test above)"
}
