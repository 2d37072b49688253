#!/usr/bin/env bats
# 1000-fetch-faults.bats - atlas-fetch under injected faults from the mock
# Hub: dropped connections (resume with Range), 500s and 429 Retry-After
# (retry with backoff), a wrong checksum (rejected, cache clean), and a
# kill -9 in the middle of a download followed by a good re-run.

load test_helper

teardown() {
	hub_stop
}

MODEL_SHA=

model_sha() {
	sha256sum "$GOLDEN/qwen3/model.safetensors" | cut -d' ' -f1
}

@test "a connection dropped mid-file is resumed with a Range request" {
	hub_start HUBMOCK_DROP=model.safetensors
	run -0 --separate-stderr timeout 20 atlas-fetch test/tiny
	expect_same_file "$output/model.safetensors" "$GOLDEN/qwen3/model.safetensors"
	expect_eq "$(hub_requests '^GET /cdn/.* range=bytes=[1-9][0-9]*-')" 1 "resumed requests"
}

@test "500s are retried with backoff until they pass" {
	hub_start HUBMOCK_FAIL500=3
	run -0 --separate-stderr timeout 20 atlas-fetch -j 1 test/tiny
	[ -f "$output/model.safetensors" ]
	expect_same_file "$output/tokenizer.json" "$GOLDEN/qwen3/tokenizer.json"
}

@test "500s on the API call are retried too" {
	hub_start HUBMOCK_API500=2
	run -0 --separate-stderr timeout 20 atlas-fetch -I config.json test/tiny
	expect_eq "$(hub_requests '^GET /api/')" 3 "API requests"
}

@test "more 500s than --retries: exit 1 naming the file and the status, partial cache" {
	hub_start HUBMOCK_FAIL500=50
	run -1 --separate-stderr timeout 20 atlas-fetch -j 1 --retries 2 -I config.json test/tiny
	expect_contains "$stderr" "'config.json'"
	expect_contains "$stderr" "500"
	expect_contains "$stderr" "run atlas-fetch again"
	# no ref is written for an incomplete snapshot, so atlas-run does not find it
	[ ! -e "$HF_HUB_CACHE/models--test--tiny/refs/main" ]
}

@test "429 with Retry-After: waits the given second and succeeds" {
	hub_start HUBMOCK_429=1
	local t0 t1
	t0=$(date +%s%N)
	run -0 --separate-stderr timeout 20 atlas-fetch -j 1 -I config.json test/tiny
	t1=$(date +%s%N)
	[ -f "$output/config.json" ]
	# Retry-After: 1 is honoured over the 20 ms test backoff
	[ $(((t1 - t0) / 1000000)) -ge 900 ]
}

@test "a wrong checksum is rejected: exit 1, clear message, no file in the cache" {
	hub_start HUBMOCK_CORRUPT=model.safetensors
	run -1 --separate-stderr timeout 20 atlas-fetch test/tiny
	expect_contains "$stderr" "checksum mismatch for 'model.safetensors'"
	expect_contains "$stderr" "$(model_sha)"
	local repo=$HF_HUB_CACHE/models--test--tiny
	[ ! -e "$repo/blobs/$(model_sha)" ]
	[ ! -e "$repo/blobs/$(model_sha).incomplete" ]
	expect_empty "$(find "$repo/snapshots" -name model.safetensors)" "snapshot link"
	[ ! -e "$repo/refs/main" ]
	# the good files did arrive
	[ -n "$(find "$repo/snapshots" -name config.json)" ]
}

@test "kill -9 in the middle of a download, then a re-run resumes and completes" {
	hub_start HUBMOCK_TRICKLE=model.safetensors:200000
	atlas-fetch -q test/tiny >/dev/null 2>&1 &
	local pid=$! repo=$HF_HUB_CACHE/models--test--tiny part i
	part=$repo/blobs/$(model_sha).incomplete
	for i in $(seq 100); do
		[ -s "$part" ] && [ "$(wc -c <"$part")" -gt 100000 ] && break
		sleep 0.05
	done
	kill -9 "$pid"
	wait "$pid" 2>/dev/null || true
	[ -s "$part" ]
	[ ! -e "$repo/blobs/$(model_sha)" ]
	[ ! -e "$repo/refs/main" ]
	hub_stop
	hub_start
	run -0 --separate-stderr timeout 20 atlas-fetch test/tiny
	expect_same_file "$output/model.safetensors" "$GOLDEN/qwen3/model.safetensors"
	expect_eq "$(hub_requests '^GET /cdn/.* range=bytes=[1-9][0-9]*-')" 1 "resumed requests"
	[ ! -e "$part" ]
	run -0 atlas-run -m test/tiny -p hi -n 2 -q
}

@test "a progress display is plain lines when stderr is not a terminal; -q silences it" {
	hub_start
	run -0 --separate-stderr timeout 20 atlas-fetch test/tiny
	expect_contains "$stderr" "atlas-fetch: fetching 'model.safetensors' ("
	expect_contains "$stderr" "atlas-fetch: fetched 'model.safetensors'"
	rm -rf "$HF_HUB_CACHE"
	run -0 --separate-stderr timeout 20 atlas-fetch -q test/tiny
	expect_empty "$stderr" "stderr with -q"
}
