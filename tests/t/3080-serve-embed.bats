#!/usr/bin/env bats
# 3080-serve-embed.bats - POST /v1/embeddings on the tiny Qwen3 embedding
# model of tests/fixtures/embed/qwen3-embed (last-token pooling, L2-
# normalized; float64 references in its expected.json): the vectors match
# the reference, base64 is the same float32 values, dimensions truncates
# and renormalizes, list and token-id inputs come back in order with the
# vectors each gets alone, usage counts the tokens, and bad input is a 400
# in OpenAI's shape. The server runs 8 tokens a step, so the longest
# input is prefilled in chunks. A generation model (models/default)
# refuses /v1/embeddings, and the embedding model refuses to generate,
# each with a 400 naming the reason. JSON is checked with node.

load 3000-serve-helper

EMBED=$ATLAS_SRC/tests/fixtures/embed/qwen3-embed

setup_file() {
	serve_start E -m "$EMBED" -c 64 --max-seqs 4 --max-batch-tokens 8
	serve_start G
}

teardown_file() {
	serve_stop E
	serve_stop G
}

fail() {
	printf '%s\n' "$1" >&2
	return 1
}

# js CODE - run node with the last body as `b` (parsed JSON) and the
# fixture's expected.json as `x`; fails the test when a check fails.
js() {
	command -v node >/dev/null || fail "node is not installed (scripts/install-deps)"
	printf '%s' "$body" | EXPECTED="$EMBED/expected.json" node -e '
		const x = JSON.parse(require("fs").readFileSync(process.env.EXPECTED, "utf8"));
		let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
			const b = JSON.parse(s);
			function check(c, w) { if (!c) { console.error("check failed: " + w + "\n" + s.slice(0, 2000)); process.exit(1); } }
			function maxdiff(a, r) { let m = 0; for (let i = 0; i < r.length; i++) m = Math.max(m, Math.abs(a[i] - r[i])); return m; }
			function norm(a) { return Math.sqrt(a.reduce((t, v) => t + v * v, 0)); }
			'"$1"'
		});'
}

# save NAME - keep the last body in $BATS_FILE_TMPDIR/NAME.json
save() {
	printf '%s' "$body" >"$BATS_FILE_TMPDIR/$1.json"
}

@test "one string: the vector matches the float64 reference, usage counts its tokens" {
	http POST "$E_URL/v1/embeddings" '{"model":"anything","input":"Hello world"}'
	expect_eq "$status_code" 200
	js '
		check(b.object === "list", "object list");
		check(b.model === "qwen3-embed", "model " + b.model);
		check(b.data.length === 1, "one item");
		const d = b.data[0], c = x.cases.find(c => c.input === "Hello world");
		check(d.object === "embedding" && d.index === 0, "item shape");
		check(d.embedding.length === 64, "64 values");
		check(Math.abs(norm(d.embedding) - 1) < 1e-5, "normalized");
		check(maxdiff(d.embedding, c.last) < 1e-3, "reference: " + maxdiff(d.embedding, c.last));
		check(b.usage.prompt_tokens === c.ids.length, "prompt_tokens " + b.usage.prompt_tokens);
		check(b.usage.total_tokens === c.ids.length, "total_tokens");'
}

@test "every case, in one list: indices in order, each matches its reference (chunked prefill)" {
	local inputs
	inputs=$(node -e 'const x = require(process.argv[1]); console.log(JSON.stringify(x.cases.map(c => c.input)))' "$EMBED/expected.json")
	http POST "$E_URL/v1/embeddings" "{\"input\":$inputs}"
	expect_eq "$status_code" 200
	save list
	js '
		check(b.data.length === x.cases.length, "one item per input");
		let tokens = 0;
		b.data.forEach((d, i) => {
			check(d.index === i, "index " + d.index + " at " + i);
			const m = maxdiff(d.embedding, x.cases[i].last);
			check(m < 1e-3, "case " + i + ": max abs diff " + m);
			tokens += x.cases[i].ids.length;
		});
		check(b.usage.prompt_tokens === tokens && b.usage.total_tokens === tokens, "usage " + JSON.stringify(b.usage));'
}

@test "batched or alone, an input gets the same vector" {
	http POST "$E_URL/v1/embeddings" '{"input":"The meaning of life is"}'
	expect_eq "$status_code" 200
	local one=$body
	body=$(cat "$BATS_FILE_TMPDIR/list.json")
	ONE=$one js '
		const one = JSON.parse(process.env.ONE).data[0].embedding;
		const i = x.cases.findIndex(c => c.input === "The meaning of life is");
		check(JSON.stringify(b.data[i].embedding) === JSON.stringify(one), "batched differs from alone");'
}

@test "token ids: a list and a list of lists give the vectors of their text" {
	local ids
	ids=$(node -e 'const x = require(process.argv[1]); console.log(JSON.stringify(x.cases.map(c => c.ids)))' "$EMBED/expected.json")
	http POST "$E_URL/v1/embeddings" "{\"input\":$ids}"
	expect_eq "$status_code" 200
	local lists=$body
	body=$(cat "$BATS_FILE_TMPDIR/list.json")
	LISTS=$lists js '
		const l = JSON.parse(process.env.LISTS);
		check(l.data.length === b.data.length, "as many items");
		l.data.forEach((d, i) => check(JSON.stringify(d.embedding) === JSON.stringify(b.data[i].embedding), "item " + i));
		check(l.usage.prompt_tokens === b.usage.prompt_tokens, "usage");'
	ids=$(node -e 'const x = require(process.argv[1]); console.log(JSON.stringify(x.cases[0].ids))' "$EMBED/expected.json")
	http POST "$E_URL/v1/embeddings" "{\"input\":$ids}"
	expect_eq "$status_code" 200
	js '
		check(b.data.length === 1, "one list of ids is one input");
		check(maxdiff(b.data[0].embedding, x.cases[0].last) < 1e-3, "reference");
		check(b.usage.prompt_tokens === x.cases[0].ids.length, "usage");'
}

@test "base64: the little-endian float32 bytes of the float response" {
	http POST "$E_URL/v1/embeddings" '{"input":["Hello world","a"],"encoding_format":"base64"}'
	expect_eq "$status_code" 200
	local b64=$body
	http POST "$E_URL/v1/embeddings" '{"input":["Hello world","a"],"encoding_format":"float"}'
	expect_eq "$status_code" 200
	B64=$b64 js '
		const e = JSON.parse(process.env.B64);
		check(e.data.length === 2, "two items");
		e.data.forEach((d, i) => {
			check(typeof d.embedding === "string", "a string");
			const buf = Buffer.from(d.embedding, "base64");
			check(buf.length === 64 * 4, "bytes " + buf.length);
			const f = [];
			for (let k = 0; k < 64; k++) f.push(buf.readFloatLE(4 * k));
			const g = b.data[i].embedding.map(Math.fround);
			check(JSON.stringify(f) === JSON.stringify(g), "item " + i + " differs");
		});'
}

@test "dimensions: the first N values, normalized again" {
	http POST "$E_URL/v1/embeddings" '{"input":"Hello world"}'
	local full=$body
	http POST "$E_URL/v1/embeddings" '{"input":"Hello world","dimensions":16}'
	expect_eq "$status_code" 200
	FULL=$full js '
		const f = JSON.parse(process.env.FULL).data[0].embedding.slice(0, 16), d = b.data[0].embedding;
		check(d.length === 16, "16 values");
		check(Math.abs(norm(d) - 1) < 1e-5, "normalized");
		const n = norm(f);
		check(maxdiff(d, f.map(v => v / n)) < 1e-6, "the truncated vector, renormalized");'
	http POST "$E_URL/v1/embeddings" '{"input":"Hello world","dimensions":64}'
	expect_eq "$status_code" 200
	FULL=$full js 'check(JSON.stringify(b.data[0].embedding) === JSON.stringify(JSON.parse(process.env.FULL).data[0].embedding), "64 = all")'
}

@test "bad input: a 400 in OpenAI's shape naming the field, and the server stays up" {
	http POST "$E_URL/v1/embeddings" '{"input":""}'
	expect_error 400 input "empty string"
	http POST "$E_URL/v1/embeddings" '{"input":[]}'
	expect_error 400 input "empty list"
	http POST "$E_URL/v1/embeddings" '{"input":[[]]}'
	expect_error 400 input "empty"
	http POST "$E_URL/v1/embeddings" '{"input":["a",""]}'
	expect_error 400 input "'input[1]' is an empty string"
	http POST "$E_URL/v1/embeddings" '{"model":"m"}'
	expect_error 400 input "'input' is required"
	http POST "$E_URL/v1/embeddings" '{"input":42}'
	expect_error 400 input "must be a string"
	http POST "$E_URL/v1/embeddings" '{"input":["a",[1,2]]}'
	expect_error 400 input "'input[1]' must be a string"
	http POST "$E_URL/v1/embeddings" '{"input":[1,-2]}'
	expect_error 400 input "outside the vocabulary"
	http POST "$E_URL/v1/embeddings" '{"input":[1,2.5]}'
	expect_error 400 input "only integers"
	http POST "$E_URL/v1/embeddings" '{"input":"a","dimensions":0}'
	expect_error 400 dimensions "'dimensions' must be in [1, 64]"
	http POST "$E_URL/v1/embeddings" '{"input":"a","dimensions":65}'
	expect_error 400 dimensions "not 65"
	http POST "$E_URL/v1/embeddings" '{"input":"a","dimensions":"8"}'
	expect_error 400 dimensions "must be an integer"
	http POST "$E_URL/v1/embeddings" '{"input":"a","encoding_format":"bits"}'
	expect_error 400 encoding_format "'float' or 'base64'"
	http POST "$E_URL/v1/embeddings" '{"input":"a","encoding_format":1}'
	expect_error 400 encoding_format "must be a string"
	local long
	long=$(node -e 'console.log(JSON.stringify(Array(65).fill(7)))')
	http POST "$E_URL/v1/embeddings" "{\"input\":$long}"
	expect_error 400 input "65 tokens, more than the context of 64"
	expect_contains "$body" '"code":"context_length_exceeded"'
	http POST "$E_URL/v1/embeddings" '{"input":'
	expect_eq "$status_code" 400
	http GET "$E_URL/health"
	expect_eq "$status_code" 200
	http POST "$E_URL/v1/embeddings" '{"input":"a"}'
	expect_eq "$status_code" 200
}

@test "a generation model refuses /v1/embeddings: not an embedding model" {
	http POST "$G_URL/v1/embeddings" '{"input":"Hello world"}'
	expect_error 400 model "is not an embedding model"
	expect_contains "$body" '"code":"model_not_embedding"'
	expect_contains "$body" "pooling"
	http POST "$G_URL/v1/completions" '{"prompt":"Hello","max_tokens":2}'
	expect_eq "$status_code" 200
}

@test "the embedding model refuses to generate: chat, completions and messages are a 400" {
	http POST "$E_URL/v1/chat/completions" '{"messages":[{"role":"user","content":"hi"}]}'
	expect_error 400 model "is an embedding model"
	expect_contains "$body" '"code":"model_is_embedding"'
	http POST "$E_URL/v1/completions" '{"prompt":"hi"}'
	expect_error 400 model "use /v1/embeddings"
	http POST "$E_URL/v1/messages" '{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}'
	expect_eq "$status_code" 400
	expect_contains "$body" '"type":"error"'
	expect_contains "$body" "is an embedding model"
	http GET "$E_URL/health"
	expect_eq "$status_code" 200
}

@test "a client that leaves cancels its inputs, and the server goes on" {
	node -e 'console.log(JSON.stringify({input: Array(2000).fill("word ".repeat(50))}))' >"$BATS_TEST_TMPDIR/big.json"
	curl -s -m 0.5 -H 'Content-Type: application/json' --data-binary @"$BATS_TEST_TMPDIR/big.json" \
		"$E_URL/v1/embeddings" >/dev/null || true
	local i
	for i in $(seq 200); do
		grep -q 'the client went away; 2000 inputs cancelled' "$E_LOG" && break
		sleep 0.05
	done
	expect_contains "$(cat "$E_LOG")" 'the client went away; 2000 inputs cancelled'
	http POST "$E_URL/v1/embeddings" '{"input":"a"}'
	expect_eq "$status_code" 200
	expect_eq "$(metric "$E_URL" atlas_kv_blocks_free)" "$(metric "$E_URL" atlas_kv_blocks_total)" "KV blocks all free"
}
