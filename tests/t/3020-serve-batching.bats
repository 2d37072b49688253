#!/usr/bin/env bats
# 3020-serve-batching.bats - continuous batching through HTTP: 32
# concurrent requests answer exactly what each answers alone (greedy and
# seeded sampling; text and logprobs bit for bit), also when a small KV
# pool forces preemptions; a
# client that disconnects cancels its request and frees its blocks; a
# bounded load (200 requests, 16 at a time) leaks nothing.

load 3000-serve-helper

setup_file() {
	serve_start B --max-seqs 16 --max-batch-tokens 64
	serve_start P --max-seqs 8 --max-batch-tokens 32 --kv-blocks 12
}

teardown_file() {
	serve_stop B
	serve_stop P
}

# body_for I BASE - request I of the set: different prompts, lengths
# (BASE + 0..8 tokens) and samplers (every fourth one seeded sampling),
# each with the logprobs of its tokens and top 2 (17 significant digits,
# so a changed bit shows).
body_for() {
	local i=$1 temp=0
	[ $((i % 4)) -eq 3 ] && temp=0.9
	printf '{"prompt":"Story %d: once upon a time in the land number %d there","max_tokens":%d,"temperature":%s,"seed":%d,"ignore_eos":true,"logprobs":2}' \
		"$i" $((i * 7)) $(($2 + i % 9)) "$temp" "$i"
}

# run_set URL DIR PARALLEL BASE - post the 32 requests (all at once, or
# one after the other) with one curl, and keep each response's choices
# (text, logprobs, finish reason) in DIR/I.
run_set() {
	local url=$1 dir=$2 i
	mkdir -p "$dir"
	: >"$dir/curl.cfg"
	for i in $(seq 0 31); do
		printf 'url = "%s/v1/completions"\nheader = "Content-Type: application/json"\ndata = "%s"\noutput = "%s/%d.json"\n' \
			"$url" "$(body_for "$i" "$4" | sed 's/"/\\"/g')" "$dir" "$i" >>"$dir/curl.cfg"
		[ "$i" = 31 ] || echo next >>"$dir/curl.cfg"
	done
	if [ "$3" = 1 ]; then
		curl -s -Z --parallel-immediate --parallel-max 32 -K "$dir/curl.cfg"
	else
		curl -s -K "$dir/curl.cfg"
	fi
	for i in $(seq 0 31); do
		sed 's/.*"choices":\[\(.*\)\],"usage".*/\1/' "$dir/$i.json" >"$dir/$i"
	done
}

expect_same_sets() {
	local i
	for i in $(seq 0 31); do
		expect_contains "$(cat "$2/$i")" '"finish_reason":"length"' "response $i"
		expect_contains "$(cat "$2/$i")" '"top_logprobs":[{' "response $i logprobs"
		expect_same_file "$1/$i" "$2/$i"
	done
}

@test "32 concurrent requests equal the same requests served alone" {
	run_set "$B_URL" "$BATS_TEST_TMPDIR/alone" 0 8
	run_set "$B_URL" "$BATS_TEST_TMPDIR/together" 1 8
	expect_same_sets "$BATS_TEST_TMPDIR/alone" "$BATS_TEST_TMPDIR/together"
	# they really did share steps
	steps=$(metric "$B_URL" atlas_engine_steps_total)
	[ "$steps" -lt $((2 * 32 * 12)) ]
}

@test "with a small KV pool, preempted requests still answer as alone" {
	run_set "$P_URL" "$BATS_TEST_TMPDIR/alone" 0 40
	run_set "$P_URL" "$BATS_TEST_TMPDIR/together" 1 40
	expect_same_sets "$BATS_TEST_TMPDIR/alone" "$BATS_TEST_TMPDIR/together"
	[ "$(metric "$P_URL" atlas_preemptions_total)" -gt 0 ]
	expect_eq "$(metric "$P_URL" atlas_kv_blocks_free)" 12 "free blocks"
}

@test "a client that disconnects mid-stream cancels its request" {
	curl -sN --max-time 0.5 "$B_URL/v1/completions" -H 'Content-Type: application/json' \
		-d '{"prompt":"go on","max_tokens":1900,"temperature":0,"ignore_eos":true,"stream":true}' \
		>"$BATS_TEST_TMPDIR/partial" || true
	expect_contains "$(head -1 "$BATS_TEST_TMPDIR/partial")" 'data: {' "got a start"
	for i in $(seq 50); do
		[ "$(metric "$B_URL" atlas_requests_running)" = 0 ] && break
		sleep 0.05
	done
	expect_eq "$(metric "$B_URL" atlas_requests_running)" 0 "running"
	expect_eq "$(metric "$B_URL" atlas_kv_blocks_used)" 0 "used blocks"
	expect_match "$(cat "$B_LOG")" 'finish cancelled' "log"
}

rss_kb() {
	awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

# load_cfg URL FIRST LAST - a curl config posting requests FIRST..LAST,
# half of them streamed, each printing its status code.
load_cfg() {
	local i stream
	for i in $(seq "$2" "$3"); do
		stream=false
		[ $((i % 2)) = 0 ] && stream=true
		printf 'url = "%s/v1/completions"\nheader = "Content-Type: application/json"\ndata = "{\\"prompt\\":\\"load %d once upon a time\\",\\"max_tokens\\":%d,\\"ignore_eos\\":true,\\"stream\\":%s}"\noutput = "/dev/null"\nwrite-out = "%%{http_code}\\n"\n' \
			"$1" "$i" $((4 + i % 13)) "$stream"
		[ "$i" = "$3" ] || echo next
	done
}

@test "load: 200 requests at concurrency 16 leak no blocks, requests or memory" {
	load_cfg "$B_URL" 1 48 >"$BATS_TEST_TMPDIR/warm.cfg"
	load_cfg "$B_URL" 1 200 >"$BATS_TEST_TMPDIR/load.cfg"
	curl -s -Z --parallel-max 16 -K "$BATS_TEST_TMPDIR/warm.cfg" >"$BATS_TEST_TMPDIR/warm"
	before=$(rss_kb "$B_PID")
	curl -s -Z --parallel-max 16 -K "$BATS_TEST_TMPDIR/load.cfg" >"$BATS_TEST_TMPDIR/codes"
	after=$(rss_kb "$B_PID")
	expect_eq "$(sort -u "$BATS_TEST_TMPDIR/codes")" 200 "status codes"
	expect_eq "$(wc -l <"$BATS_TEST_TMPDIR/codes")" 200 "answers"
	expect_eq "$(metric "$B_URL" atlas_requests_running)" 0 "running"
	expect_eq "$(metric "$B_URL" atlas_requests_waiting)" 0 "waiting"
	expect_eq "$(metric "$B_URL" atlas_kv_blocks_free)" "$(metric "$B_URL" atlas_kv_blocks_total)" "free blocks"
	echo "# RSS after warm-up ${before} kB, after load ${after} kB" >&3
	# ASan keeps freed memory in its quarantine, so RSS grows under the
	# sanitizers (104 MB to 140 MB here): compared only without them
	[ -n "${ATLAS_SAN:-}" ] || [ "$after" -le $((before * 11 / 10)) ]
}
