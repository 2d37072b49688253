#!/usr/bin/env bats
# 3030-serve-tp.bats - atlas-serve --tp N: N thread ranks on the CPU,
# rank 0 running the scheduler; /v1/completions answers exactly what one
# rank answers (greedy, seeded sampling, 8 requests at once); SIGTERM and
# SIGINT stop the followers and exit 0 in bounded time; the refusals
# (bad N, N not dividing the heads, CUDA with fewer GPUs than N).

load 3000-serve-helper

setup_file() {
	serve_start ONE --device cpu
	serve_start TP2 --device cpu --tp 2
	serve_start TP4 --device cpu --tp 4 --max-seqs 8 --max-batch-tokens 64
}

teardown_file() {
	serve_stop ONE
	serve_stop TP2
	serve_stop TP4
}

# body I TEMP - request I: its own prompt, 16 + I % 5 tokens, seed I.
body() {
	printf '{"prompt":"Story %d: once upon a time there","max_tokens":%d,"temperature":%s,"seed":%d,"ignore_eos":true}' \
		"$1" $((16 + $1 % 5)) "$2" "$1"
}

# choices URL I TEMP - the choices of request I (text and finish reason).
choices() {
	http POST "$1/v1/completions" "$(body "$2" "$3")"
	expect_eq "$status_code" 200 "request $2 to $1"
	sed 's/.*"choices":\[\(.*\)\],"usage".*/\1/' <<<"$body"
}

# wait_exit PID SECONDS - wait for a child to exit within SECONDS; sets
# $exit_code (kills it and fails if it did not).
wait_exit() {
	local i
	for i in $(seq $(($2 * 20))); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$1" 2>/dev/null; then
		kill -9 "$1" 2>/dev/null
		wait "$1" 2>/dev/null || true
		echo "the server did not exit within $2 s" >&2
		return 1
	fi
	exit_code=0
	wait "$1" || exit_code=$?
}

@test "--help lists --tp" {
	run -0 --separate-stderr atlas-serve --help
	expect_contains "$output" "--tp N"
}

@test "the log names the thread ranks" {
	expect_contains "$(cat "$TP2_LOG")" "on cpu (2 tensor-parallel thread ranks)" "tp 2 log"
	expect_contains "$(cat "$TP4_LOG")" "on cpu (4 tensor-parallel thread ranks)" "tp 4 log"
}

@test "temperature 0: --tp 2 and --tp 4 answer what one rank answers" {
	local one
	for i in 0 1 2; do
		one=$(choices "$ONE_URL" "$i" 0)
		expect_contains "$one" '"finish_reason":"length"' "one rank, request $i"
		expect_eq "$(choices "$TP2_URL" "$i" 0)" "$one" "--tp 2, request $i"
		expect_eq "$(choices "$TP4_URL" "$i" 0)" "$one" "--tp 4, request $i"
	done
}

@test "seeded sampling: --tp 2 answers what one rank answers" {
	local one
	for i in 3 4; do
		one=$(choices "$ONE_URL" "$i" 0.9)
		expect_eq "$(choices "$TP2_URL" "$i" 0.9)" "$one" "--tp 2, request $i"
	done
}

@test "8 concurrent requests to --tp 4 equal one rank's answers alone" {
	local d=$BATS_TEST_TMPDIR i temp
	: >"$d/curl.cfg"
	for i in $(seq 0 7); do
		temp=0
		[ $((i % 2)) -eq 1 ] && temp=0.9
		choices "$ONE_URL" "$i" "$temp" >"$d/one.$i"
		printf 'url = "%s/v1/completions"\nheader = "Content-Type: application/json"\ndata = "%s"\noutput = "%s/tp.%d.json"\n' \
			"$TP4_URL" "$(body "$i" "$temp" | sed 's/"/\\"/g')" "$d" "$i" >>"$d/curl.cfg"
		[ "$i" = 7 ] || echo next >>"$d/curl.cfg"
	done
	curl -s -Z --no-progress-meter --parallel-immediate --parallel-max 8 \
		-K "$d/curl.cfg"
	for i in $(seq 0 7); do
		expect_eq "$(sed 's/.*"choices":\[\(.*\)\],"usage".*/\1/' "$d/tp.$i.json")" \
			"$(cat "$d/one.$i")" "request $i"
	done
}

@test "SIGTERM and SIGINT stop the followers: exit 0 within 20 s" {
	local log pid sig port
	for sig in TERM INT; do
		# a log per signal: the first server's "ready" must not be read
		# before the shell has truncated the file for the second
		log=$BATS_TEST_TMPDIR/stop-$sig.log
		atlas-serve --port 0 --device cpu --tp 2 >/dev/null 2>"$log" 3>&- &
		pid=$!
		for i in $(seq 600); do
			grep -q '^atlas-serve: ready' "$log" && break
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.05
		done
		expect_contains "$(cat "$log")" "atlas-serve: ready" "$sig: started"
		port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9][0-9]*\).*/\1/p' "$log")
		http POST "http://127.0.0.1:$port/v1/completions" "$(body 1 0)"
		expect_eq "$status_code" 200 "$sig: a request first"
		kill -s "$sig" "$pid"
		wait_exit "$pid" 20
		expect_eq "$exit_code" 0 "$sig: exit status"
		expect_contains "$(cat "$log")" "stopping" "$sig: log"
	done
}

@test "--tp: bad values exit 2 naming the flag" {
	for v in 0 -1 x 257; do
		run -2 --separate-stderr atlas-serve --tp "$v"
		expect_contains "$stderr" "--tp" "--tp $v"
		expect_empty "$output" "stdout"
	done
}

@test "--tp 3 on a model with 4 heads: exit 1 naming the head count" {
	run -1 --separate-stderr timeout 60 atlas-serve --port 0 --device cpu --tp 3
	expect_contains "$stderr" "num_attention_heads (4) to be a multiple of 3"
	expect_empty "$output" "stdout"
}

@test "--tp on CUDA with fewer GPUs than N: exit 1 before listening" {
	run -1 --separate-stderr env LD_LIBRARY_PATH=/nonexistent timeout 60 atlas-serve \
		--port 0 --device cuda --tp 2
	expect_contains "$stderr" "--tp 2 needs 2 GPUs, but this machine has 0"
	[[ "$stderr" != *listening* ]] || { echo "it listened" >&2; return 1; }
	expect_empty "$output" "stdout"
	run -1 --separate-stderr timeout 60 atlas-serve --port 0 --device tpu --tp 2
	expect_contains "$stderr" "device 'tpu' cannot run tensor-parallel ranks"
}
