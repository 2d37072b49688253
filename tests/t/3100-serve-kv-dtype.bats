#!/usr/bin/env bats
# 3100-serve-kv-dtype.bats - atlas-serve --kv-dtype: servers with an FP8
# and a q4 KV cache answer, batched requests as they answer alone and
# repeated prompts from the prefix cache unchanged (a cache row's bytes
# depend on that row alone); the format is in the ready log line and in
# the atlas_kv_cache_info gauge of /metrics (auto shown as the activation
# type, f32 on the CPU); an unknown format exits 2, a model whose
# head_dim the format cannot hold exits 1 at load.

load 3000-serve-helper

setup_file() {
	serve_start K --device cpu --max-seqs 4 --max-batch-tokens 32 --kv-dtype fp8
	serve_start Q --device cpu --max-seqs 8 --max-batch-tokens 32 --kv-dtype q4
	serve_start D --device cpu --max-seqs 4 --max-batch-tokens 32
}

teardown_file() {
	serve_stop K
	serve_stop Q
	serve_stop D
}

@test "--help, the man page and the completions list --kv-dtype and its values" {
	run -0 --separate-stderr atlas-serve --help
	expect_contains "$output" "--kv-dtype FMT" "usage"
	expect_contains "$output" "fp8" "usage"
	expect_contains "$output" "q4" "usage"
	expect_contains "$(cat "$ATLAS_SRC/man/atlas-serve.1")" '\-\-kv\-dtype' "man"
	expect_contains "$(cat "$ATLAS_SRC/man/atlas-serve.1")" 'atlas_kv_cache_info' "man"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-serve")" "--kv-dtype" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-serve")" "auto bf16 fp8 q4" "bash values"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-serve")" "--kv-dtype=" "zsh"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-serve")" "(auto bf16 fp8 q4)" "zsh values"
}

@test "an unknown format exits 2 naming --kv-dtype, before binding" {
	run -2 --separate-stderr atlas-serve --port 0 --kv-dtype q5
	expect_contains "$stderr" "--kv-dtype" "stderr"
	expect_contains "$stderr" "'q5'" "stderr"
	expect_contains "$stderr" "auto, bf16, fp8 or q4" "stderr"
	[[ $stderr != *"listening on"* ]]
}

@test "a model whose head_dim the format cannot hold exits 1 at load" {
	# the golden mistral model has head_dim 8: no q4
	run -1 --separate-stderr timeout 30 atlas-serve --port 0 --device cpu \
		-m "$GOLDEN/mistral" --kv-dtype q4
	expect_contains "$stderr" "atlas-serve: error: " "stderr"
	expect_contains "$stderr" "--kv-dtype q4" "stderr"
	expect_contains "$stderr" "head_dim" "stderr"
}

@test "fp8: the ready line and /metrics name the format" {
	expect_match "$(cat "$K_LOG")" "[0-9]+ KV blocks of [0-9]+ tokens \(fp8\)," "ready line"
	local m
	m=$(curl -s "$K_URL/metrics")
	expect_contains "$m" "# TYPE atlas_kv_cache_info gauge" "metrics"
	expect_contains "$m" 'atlas_kv_cache_info{dtype="fp8"} 1' "metrics"
}

@test "fp8: answers a completion" {
	http POST "$K_URL/v1/completions" '{"prompt":"Once upon a time","max_tokens":6,"temperature":0,"ignore_eos":true}'
	expect_eq "$status_code" 200 "HTTP status"
	expect_contains "$body" '"finish_reason":"length"' "finish"
	expect_contains "$body" '"completion_tokens":6' "usage"
	[ -n "$(completion_text "$body")" ]
}

@test "auto (the default) shows the activation type: f32 on the CPU" {
	expect_match "$(cat "$D_LOG")" "[0-9]+ KV blocks of [0-9]+ tokens \(f32\)," "ready line"
	expect_contains "$(curl -s "$D_URL/metrics")" 'atlas_kv_cache_info{dtype="f32"} 1' "metrics"
}

@test "fp8: a repeated prompt is read from the prefix cache, the text unchanged" {
	local p="" i first cached req
	for i in $(seq 12); do p="$p line $i of a story about a cat and a dog."; done
	req="{\"prompt\":\"$p\",\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":1}"
	http POST "$K_URL/v1/completions" "$req"
	expect_eq "$status_code" 200 "HTTP status"
	first=$(choices "$body")
	http POST "$K_URL/v1/completions" "$req"
	expect_eq "$(choices "$body")" "$first" "the repeat"
	cached=$(printf '%s\n' "$body" | sed -n 's/.*"cached_tokens":\([0-9]*\).*/\1/p')
	[ "${cached:-0}" -gt 0 ] || { echo "cached_tokens '$cached'" >&2; false; }
}

# alone_and_together URL - 8 requests (greedy, with logprobs) one after
# the other, then all at once; each answer the same bit for bit.
alone_and_together() {
	local d=$BATS_TEST_TMPDIR mode i
	for mode in alone together; do
		mkdir -p "$d/$mode"
		: >"$d/$mode.cfg"
		for i in $(seq 0 7); do
			printf 'url = "%s/v1/completions"\nheader = "Content-Type: application/json"\ndata = "{\\"prompt\\":\\"Tale %d: once upon a time there\\",\\"max_tokens\\":%d,\\"temperature\\":0,\\"ignore_eos\\":true,\\"logprobs\\":2}"\noutput = "%s/%d.json"\n' \
				"$1" "$i" $((4 + i)) "$d/$mode" "$i" >>"$d/$mode.cfg"
			[ "$i" = 7 ] || echo next >>"$d/$mode.cfg"
		done
	done
	curl -s -K "$d/alone.cfg"
	curl -s -Z --parallel-immediate --parallel-max 8 -K "$d/together.cfg"
	for i in $(seq 0 7); do
		expect_contains "$(cat "$d/alone/$i.json")" '"top_logprobs":[{' "response $i"
		choices "$(cat "$d/alone/$i.json")" >"$d/alone/$i"
		choices "$(cat "$d/together/$i.json")" >"$d/together/$i"
		expect_same_file "$d/alone/$i" "$d/together/$i"
	done
}

@test "fp8: 8 concurrent requests answer what each answers alone" {
	alone_and_together "$K_URL"
}

@test "q4: answers, and 8 concurrent requests answer what each answers alone" {
	expect_contains "$(curl -s "$Q_URL/metrics")" 'atlas_kv_cache_info{dtype="q4"} 1' "metrics"
	alone_and_together "$Q_URL"
}
