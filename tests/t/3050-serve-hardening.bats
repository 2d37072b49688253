#!/usr/bin/env bats
# 3050-serve-hardening.bats - atlas-serve facing clients it cannot trust:
# errors of the HTTP layer in the API's JSON shape, JSON bodies only and
# CORS for named origins, graceful shutdown (drain, then streams end with
# an error event and other requests with 503), connection limits, the
# idle timeout, thousands of idle connections, rate limits with
# Retry-After, and the chat template's render limits. Raw sockets and
# timing come from small python3 scripts (skipped without python3).

load 3000-serve-helper

setup_file() {
	command -v python3 >/dev/null || return 0
	# raw PORT: send stdin as it is, print what comes back until the
	# server closes (or 3 s pass)
	cat >"$BATS_FILE_TMPDIR/raw.py" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(sys.stdin.buffer.read())
s.settimeout(3)
out = b""
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
except (socket.timeout, ConnectionResetError):
    pass
sys.stdout.buffer.write(out)
PY
	# idle PORT N REQS [PATH]: hold N idle connections, then time REQS
	# requests on fresh ones (after one warm-up); print "held H p99_ms MS
	# failed F", H = idle connections still open at the end
	cat >"$BATS_FILE_TMPDIR/idle.py" <<'PY'
import http.client, json, socket, sys, time
port, n, m = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
socks = []
for i in range(n):
    s = socket.socket()
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    socks.append(s)
time.sleep(0.5)
body = json.dumps({"prompt": "Once", "max_tokens": 4, "temperature": 0})
def one():
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        c.close()
        return r.status == 200
    except OSError:
        return False
one()
lat, failed = [], 0
for i in range(m):
    t = time.time()
    failed += not one()
    lat.append(time.time() - t)
lat.sort()
held = 0
for s in socks:
    s.setblocking(False)
    try:
        held += s.recv(1) != b""
    except BlockingIOError:
        held += 1
    except OSError:
        pass
    s.close()
print("held %d p99_ms %d failed %d" % (held, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, failed))
PY
	# hold PORT N SECONDS: N idle connections for SECONDS
	cat >"$BATS_FILE_TMPDIR/hold.py" <<'PY'
import socket, sys, time
socks = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for i in range(int(sys.argv[2]))]
time.sleep(0.5)  # the server accepts them
print("holding", flush=True)
time.sleep(float(sys.argv[3]))
PY
	# closed_after PORT HEAD: send HEAD (may be partial) and print the
	# seconds until the server closes the connection, with what it sent
	cat >"$BATS_FILE_TMPDIR/closed_after.py" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(sys.argv[2].encode())
t = time.time()
s.settimeout(10)
got = b""
try:
    while True:
        d = s.recv(4096)
        if not d:
            break
        got += d
except OSError:
    pass
print("%.1f %d" % (time.time() - t, len(got)))
PY
	serve_start H --max-body 4096 --allowed-origins 'http://a.example, https://b.example:8443/'
}

teardown_file() {
	serve_stop H
}

setup() {
	command -v python3 >/dev/null || skip "python3 is not installed"
}

fail() {
	printf '%s\n' "$*" >&2
	return 1
}

expect_ne() { # ACTUAL UNWANTED [WHAT]
	if [ "$1" = "$2" ]; then
		printf '%s is %s\n' "${3:-value}" "$1" >&2
		return 1
	fi
}

expect_not_contains() { # HAYSTACK NEEDLE [WHAT]
	case $1 in
	*"$2"*)
		printf '%s contains "%s":\n%s\n' "${3:-text}" "$2" "$1" >&2
		return 1
		;;
	esac
}

# raw - send stdin to server H as it is; print the reply
raw() {
	python3 "$BATS_FILE_TMPDIR/raw.py" "${H_URL##*:}"
}

port_of() {
	printf '%s\n' "${1##*:}"
}

# json_error_ok TEXT - TEXT is one JSON object with an "error" in the OpenAI shape
json_error_ok() {
	printf '%s' "$1" | python3 -c 'import json,sys; e=json.load(sys.stdin)["error"]; assert set(e) >= {"message","type","param","code"}, e'
}

# wait_gauge URL NAME N - wait (up to 10 s) until the gauge NAME is N
wait_gauge() {
	local i
	for i in $(seq 200); do
		[ "$(metric "$1" "$2")" = "$3" ] && return 0
		sleep 0.05
	done
	echo "gauge $2 did not reach $3 (is $(metric "$1" "$2"))" >&2
	return 1
}

# head_error REQUEST STATUS TEXT - the raw REQUEST (printf format) is
# answered with one JSON error: STATUS, TEXT in the message, Connection:
# close, a single status line
head_error() {
	local out
	out=$(printf "$1" | raw)
	expect_match "$out" "^HTTP/1.1 $2 " "status of $1"
	expect_eq "$(printf '%s' "$out" | grep -c '^HTTP/')" 1 "status lines of $1"
	expect_contains "$out" 'Content-Type: application/json' "$1"
	expect_contains "$out" 'Connection: close' "$1"
	expect_not_contains "$out" '<html>' "$1"
	json_error_ok "${out#*$'\r\n\r\n'}"
	expect_contains "$out" "$3" "$1"
}

@test "malformed request heads get JSON errors, never libmicrohttpd's HTML or a second status line" {
	head_error 'GET /health HTTP/2.0\r\nHost: x\r\n\r\n' 505 'HTTP version not supported'
	head_error 'GET /health\r\n\r\n' 400 'malformed request line'
	head_error '\001\002 garbage\r\n\r\n' 400 'malformed request line'
	head_error 'GET /health HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n' 400 "not 'name: value'"
	head_error 'GET /health HTTP/1.1\r\nHost: x\r\nX-A : b\r\n\r\n' 400 "not 'name: value'"
	head_error 'GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n' 400 'folded header'
	head_error 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}' 400 'Content-Length is not a number'
	head_error 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}' 400 'Content-Length is not a number'
	head_error 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n{}' 413 'over the limit of 4096'
	head_error 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n' 400 'malformed chunked encoding'
	long=$(head -c 70000 /dev/zero | tr '\0' a)
	head_error "GET /$long HTTP/1.1\r\nHost: x\r\n\r\n" 414 'too long'
	head_error "GET /health HTTP/1.1\r\nHost: x\r\nX-A: $long\r\n\r\n" 431 'headers are too large'
	# the Anthropic route answers in its shape
	out=$(printf 'POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n' | raw)
	expect_contains "$out" '{"type":"error","error":{' "anthropic shape"
	# a good chunked body passes; the server still answers
	status_code=$(printf '{"prompt":"x","max_tokens":1}' | curl -s -o /dev/null -w '%{http_code}' \
		-H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' --data-binary @- "$H_URL/v1/completions")
	expect_eq "$status_code" 200 "chunked"
	expect_match "$(curl -s "$H_URL/metrics")" 'atlas_requests_total\{status="505"\} 1'
}

@test "HTTP-layer errors are JSON: several or contradicting body lengths, unknown Transfer-Encoding, bodies over --max-body" {
	out=$(printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}' | raw)
	expect_match "$out" '^HTTP/1.1 400 ' "status"
	expect_contains "$out" 'Connection: close' "headers"
	expect_contains "$out" 'Content-Type: application/json' "headers"
	expect_eq "$(printf '%s' "$out" | grep -c '^HTTP/')" 1 "status lines"
	json_error_ok "${out#*$'\r\n\r\n'}"
	expect_contains "$out" 'several Content-Length headers'
	out=$(printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}' | raw)
	expect_match "$out" '^HTTP/1.1 400 ' "status"
	expect_contains "$out" 'both Transfer-Encoding and Content-Length'
	out=$(printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip\r\n\r\n' | raw)
	expect_match "$out" '^HTTP/1.1 501 ' "status"
	json_error_ok "${out#*$'\r\n\r\n'}"
	# over --max-body, declared or chunked, in each API's shape
	big=$(head -c 5000 /dev/zero | tr '\0' 'a')
	http POST "$H_URL/v1/messages" "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"$big\"}]}"
	expect_error 413 "" "over the limit of 4096"
	expect_match "$body" '^\{"type":"error","error":\{' "anthropic shape"
	status_code=$(printf '{"prompt":"%s"}' "$big" | curl -s -o "$BATS_TEST_TMPDIR/b" -w '%{http_code}' \
		-H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' --data-binary @- "$H_URL/v1/completions")
	body=$(cat "$BATS_TEST_TMPDIR/b")
	expect_error 413 "" "over the limit of 4096"
	# and the server still answers
	http POST "$H_URL/v1/completions" '{"prompt":"x","max_tokens":1}'
	expect_eq "$status_code" 200
}

@test "POST bodies must be declared JSON: text/plain, form-urlencoded (curl -d), none or multipart is 415" {
	for ct in 'text/plain' 'text/plain;charset=UTF-8' 'multipart/form-data; boundary=x' 'application/jsonx' \
		'application/x-www-form-urlencoded'; do
		status_code=$(curl -s -o "$BATS_TEST_TMPDIR/b" -w '%{http_code}' -H "Content-Type: $ct" \
			--data-binary '{"prompt":"x","max_tokens":1}' "$H_URL/v1/completions")
		body=$(cat "$BATS_TEST_TMPDIR/b")
		expect_error 415 "" "Content-Type: application/json"
	done
	status_code=$(curl -s -o "$BATS_TEST_TMPDIR/b" -w '%{http_code}' -H 'Content-Type:' \
		--data-binary '{"messages":[{"role":"user","content":"x"}],"max_tokens":1}' "$H_URL/v1/chat/completions")
	expect_eq "$status_code" 415 "no Content-Type"
	status_code=$(curl -s -o "$BATS_TEST_TMPDIR/b" -w '%{http_code}' -H 'Content-Type: text/plain' \
		--data-binary '{"messages":[{"role":"user","content":"x"}],"max_tokens":1}' "$H_URL/v1/messages")
	expect_eq "$status_code" 415 "messages"
	expect_match "$(cat "$BATS_TEST_TMPDIR/b")" '^\{"type":"error","error":\{' "anthropic shape"
	http POST "$H_URL/v1/completions" '{"prompt":"x","max_tokens":1}' -H 'Content-Type: Application/JSON; charset=utf-8'
	expect_eq "$status_code" 200 "media type is case-insensitive"
	# curl -d's default type, with or without an Origin
	status_code=$(curl -s -o "$BATS_TEST_TMPDIR/b" -w '%{http_code}' -d '{"prompt":"x","max_tokens":1}' "$H_URL/v1/completions")
	body=$(cat "$BATS_TEST_TMPDIR/b")
	expect_error 415 "" "(not 'application/x-www-form-urlencoded')"
	status_code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Origin: http://a.example' \
		-d '{"prompt":"x","max_tokens":1}' "$H_URL/v1/completions")
	expect_eq "$status_code" 415 "form type from a browser"
	status_code=$(curl -s -o "$BATS_TEST_TMPDIR/b" -w '%{http_code}' \
		-d '{"messages":[{"role":"user","content":"x"}],"max_tokens":1}' "$H_URL/v1/messages")
	expect_eq "$status_code" 415 "form type on /v1/messages"
	expect_match "$(cat "$BATS_TEST_TMPDIR/b")" '^\{"type":"error","error":\{' "anthropic shape"
	# the server still answers JSON
	http POST "$H_URL/v1/completions" '{"prompt":"x","max_tokens":1}'
	expect_eq "$status_code" 200 "after the 415s"
}

@test "CORS for --allowed-origins only: preflight 204 with the origin, other origins 403, no CORS headers without an Origin" {
	out=$(curl -si -X OPTIONS -H 'Origin: http://a.example' -H 'Access-Control-Request-Method: POST' \
		-H 'Access-Control-Request-Headers: content-type, authorization' "$H_URL/v1/chat/completions")
	expect_match "$out" '^HTTP/1.1 204 ' "preflight"
	expect_contains "$out" 'Access-Control-Allow-Origin: http://a.example' "allow origin"
	expect_contains "$out" 'Access-Control-Allow-Methods: GET, POST, OPTIONS'
	expect_contains "$out" 'Access-Control-Allow-Headers: content-type, authorization'
	# the listed origin had a trailing slash: browsers send none
	out=$(curl -si -H 'Origin: https://b.example:8443' -H 'Content-Type: application/json' \
		-d '{"prompt":"x","max_tokens":1}' "$H_URL/v1/completions")
	expect_match "$out" '^HTTP/1.1 200 ' "allowed origin"
	expect_contains "$out" 'Access-Control-Allow-Origin: https://b.example:8443'
	out=$(curl -si -H 'Origin: https://b.example:8443' -H 'Content-Type: application/json' \
		-d '{"prompt":"x","max_tokens":1,"stream":true}' "$H_URL/v1/completions")
	expect_contains "$out" 'Access-Control-Allow-Origin: https://b.example:8443' "stream"
	out=$(curl -si -X OPTIONS -H 'Origin: http://evil.example' -H 'Access-Control-Request-Method: POST' "$H_URL/v1/chat/completions")
	expect_match "$out" '^HTTP/1.1 403 ' "other origin"
	expect_not_contains "$out" 'Access-Control-Allow-Origin'
	http POST "$H_URL/v1/completions" '{"prompt":"x","max_tokens":1}' -H 'Origin: http://evil.example'
	expect_error 403 "" "origin 'http://evil.example' is not allowed"
	http GET "$H_URL/health" "" -H 'Origin: null'
	expect_eq "$status_code" 403 "Origin: null"
	out=$(curl -si "$H_URL/health")
	expect_not_contains "$out" 'Access-Control' "no Origin"
}

@test "without --allowed-origins: requests with an Origin are 403, OPTIONS is 405, never a CORS header" {
	serve_start N
	http POST "$N_URL/v1/completions" '{"prompt":"x","max_tokens":1}' -H 'Origin: http://localhost:3000'
	expect_error 403 "" "see --allowed-origins"
	out=$(curl -si -X OPTIONS -H 'Origin: http://localhost:3000' -H 'Access-Control-Request-Method: POST' "$N_URL/v1/completions")
	expect_match "$out" '^HTTP/1.1 403 ' "preflight"
	expect_not_contains "$out" 'Access-Control-Allow'
	http OPTIONS "$N_URL/v1/completions"
	expect_error 405 "" "OPTIONS is not allowed"
	http POST "$N_URL/v1/completions" '{"prompt":"x","max_tokens":1}'
	expect_eq "$status_code" 200
	serve_stop N
	run ! atlas-serve --allowed-origins 'localhost:3000'
	expect_contains "$output" "'localhost:3000' is not an origin"
}

@test "--timeout closes idle and stalled connections; a stream waiting behind others is not cut" {
	serve_start T --timeout 1 --max-seqs 1
	port=$(port_of "$T_URL")
	read -r secs sent < <(python3 "$BATS_FILE_TMPDIR/closed_after.py" "$port" '')
	expect_match "$secs" '^[123]\.' "idle connection closed after (s)"
	read -r secs sent < <(python3 "$BATS_FILE_TMPDIR/closed_after.py" "$port" $'POST /v1/completions HTTP/1.1\r\nHost: x\r\n')
	expect_match "$secs" '^[123]\.' "stalled head closed after (s)"
	# two long requests hold the one sequence; the stream waits > 1 s for its first token
	pids=()
	for i in 1 2; do
		curl -s -o /dev/null -H 'Content-Type: application/json' \
			-d '{"prompt":"Once","max_tokens":900,"ignore_eos":true}' "$T_URL/v1/completions" &
		pids+=($!)
	done
	wait_gauge "$T_URL" atlas_http_handlers_running 2
	out=$(curl -sN -H 'Content-Type: application/json' \
		-d '{"prompt":"Once","max_tokens":3,"ignore_eos":true,"stream":true}' "$T_URL/v1/completions")
	wait "${pids[@]}"
	expect_eq "$(printf '%s\n' "$out" | grep -v '^$' | tail -1)" "data: [DONE]" "stream end"
	expect_contains "$out" '"finish_reason":"length"'
	ttft=$(sed -n 's/.*cmpl-.*generated 3 tokens, ttft \([0-9.]*\) ms.*/\1/p' "$T_LOG" | tail -1)
	expect_match "$ttft" '^[0-9]{4,}' "the stream waited over a second (ttft ms)"
	serve_stop T
}

@test "--max-connections-per-ip and --max-connections: a connection over the limit is closed at once; a freed slot works again" {
	serve_start P --max-connections-per-ip 3
	port=$(port_of "$P_URL")
	coproc HOLD { python3 "$BATS_FILE_TMPDIR/hold.py" "$port" 3 3; }
	read -r line <&"${HOLD[0]}"
	run curl -s -m 5 "$P_URL/health"
	expect_ne "$status" 0 "4th connection from one address"
	expect_eq "$output" "" "no reply"
	wait "$HOLD_PID" || true
	wait_gauge "$P_URL" atlas_http_connections 1
	http GET "$P_URL/health"
	expect_eq "$status_code" 200 "after the idle ones closed"
	serve_stop P
	serve_start C --max-connections 4 --max-connections-per-ip 0
	port=$(port_of "$C_URL")
	coproc HOLD { python3 "$BATS_FILE_TMPDIR/hold.py" "$port" 4 2; }
	read -r line <&"${HOLD[0]}"
	run curl -s -m 5 "$C_URL/health"
	expect_ne "$status" 0 "5th connection"
	expect_eq "$output" "" "no reply"
	wait "$HOLD_PID" || true
	wait_gauge "$C_URL" atlas_http_connections 1
	http GET "$C_URL/health"
	expect_eq "$status_code" 200 "after the idle ones closed"
	serve_stop C
}

@test "5000 idle connections held open while normal requests complete (p99 under 200 ms)" {
	[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge 5200 ] ||
		skip "ulimit -n is $(ulimit -n): too low to open 5000 sockets"
	serve_start I --max-connections-per-ip 0
	read -r _ held _ p99 _ failed < <(python3 "$BATS_FILE_TMPDIR/idle.py" "$(port_of "$I_URL")" 5000 20)
	echo "# held $held idle connections; p99 of 20 requests $p99 ms" >&3
	expect_eq "$held" 5000 "idle connections still open"
	expect_eq "$failed" 0 "failed requests"
	[ "$p99" -lt 200 ] || fail "p99 $p99 ms is not under 200 ms"
	wait_gauge "$I_URL" atlas_http_connections 1
	serve_stop I
}

@test "long non-streaming generations do not hold up other connections" {
	serve_start G --max-seqs 2
	pids=()
	for i in 1 2 3 4 5 6; do
		curl -s -o /dev/null -H 'Content-Type: application/json' \
			-d '{"prompt":"Once","max_tokens":600,"ignore_eos":true}' "$G_URL/v1/completions" &
		pids+=($!)
	done
	wait_gauge "$G_URL" atlas_http_handlers_running 6
	t=$(curl -s -o /dev/null -w '%{time_total}' "$G_URL/health")
	expect_match "$t" '^0\.0' "GET /health while 6 generations run (s)"
	t=$(curl -s -o /dev/null -w '%{time_total}' -H 'Content-Type: application/json' \
		-d '{"prompt":"x"}' "$G_URL/tokenize")
	expect_match "$t" '^0\.0' "POST /tokenize while 6 generations run (s)"
	kill "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" || true
	serve_stop G
}

@test "SIGTERM drains: a request in flight finishes normally, new connections are refused, the server exits" {
	serve_start D --shutdown-timeout 20
	curl -sN -H 'Content-Type: application/json' -o "$BATS_TEST_TMPDIR/s" \
		-d '{"prompt":"Once","max_tokens":600,"ignore_eos":true,"stream":true}' "$D_URL/v1/completions" &
	curl_pid=$!
	wait_gauge "$D_URL" atlas_http_handlers_running 1
	kill -TERM "$D_PID"
	sleep 0.1
	run curl -s -m 2 "$D_URL/health"
	expect_eq "$status" 7 "curl's exit status for a refused connection"
	wait "$curl_pid"
	wait "$D_PID"
	out=$(cat "$BATS_TEST_TMPDIR/s")
	expect_eq "$(printf '%s\n' "$out" | grep -v '^$' | tail -1)" "data: [DONE]" "stream end"
	expect_contains "$out" '"finish_reason":"length"'
	expect_contains "$(cat "$D_LOG")" "terminated, stopping: "
	expect_match "$(cat "$D_LOG")" "drained in [0-9.]+ s"
	expect_contains "$(cat "$D_LOG")" "generated 600 tokens"
}

@test "SIGTERM past --shutdown-timeout: streams end with an error event, never a finish; the others get 503; logged with timings" {
	serve_start X --shutdown-timeout 1 --max-seqs 1
	pids=()
	for i in 1 2; do
		curl -s -o "$BATS_TEST_TMPDIR/w$i" -w '%{http_code}' -H 'Content-Type: application/json' \
			-d '{"prompt":"Once","max_tokens":900,"ignore_eos":true}' "$X_URL/v1/completions" >"$BATS_TEST_TMPDIR/w$i.code" &
		pids+=($!)
	done
	wait_gauge "$X_URL" atlas_http_handlers_running 2
	curl -sN -H 'Content-Type: application/json' -o "$BATS_TEST_TMPDIR/oai" \
		-d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":900,"ignore_eos":true,"stream":true}' \
		"$X_URL/v1/chat/completions" &
	pids+=($!)
	curl -sN -H 'Content-Type: application/json' -o "$BATS_TEST_TMPDIR/ant" \
		-d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":900,"ignore_eos":true,"stream":true}' \
		"$X_URL/v1/messages" &
	pids+=($!)
	wait_gauge "$X_URL" atlas_http_handlers_running 4
	t0=$(date +%s%N)
	kill -TERM "$X_PID"
	wait "$X_PID" "${pids[@]}"
	elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
	[ "$elapsed_ms" -lt 6000 ] || fail "stopping took $elapsed_ms ms"
	oai=$(cat "$BATS_TEST_TMPDIR/oai")
	expect_contains "$oai" '"role":"assistant"' "the stream had begun"
	expect_not_contains "$oai" '[DONE]' "OpenAI stream"
	expect_not_contains "$oai" '"finish_reason":"' "OpenAI stream"
	last=$(printf '%s\n' "$oai" | grep -v '^$' | tail -1)
	expect_match "$last" '^data: \{"error":\{"message":"the server is shutting down' "last OpenAI event"
	json_error_ok "${last#data: }"
	ant=$(cat "$BATS_TEST_TMPDIR/ant")
	expect_contains "$ant" 'event: message_start' "the stream had begun"
	expect_not_contains "$ant" 'message_stop' "Anthropic stream"
	expect_match "$(printf '%s\n' "$ant" | grep -v '^$' | tail -2 | head -1)" '^event: error$' "last Anthropic event"
	expect_contains "$ant" '"type":"error","error":{"message":"the server is shutting down'
	# the non-streaming ones finished or got 503 (one at least: 2 x 900 tokens take over 1 s)
	codes="$(cat "$BATS_TEST_TMPDIR/w1.code") $(cat "$BATS_TEST_TMPDIR/w2.code")"
	expect_match "$codes" '503' "non-streaming statuses"
	for i in 1 2; do
		if [ "$(cat "$BATS_TEST_TMPDIR/w$i.code")" = 503 ]; then
			body=$(cat "$BATS_TEST_TMPDIR/w$i")
			status_code=503
			expect_error 503 "" "the server is shutting down"
		fi
	done
	log=$(cat "$X_LOG")
	expect_match "$log" "requests still in flight after 1 s"
	n=$(grep -c 'finish cancelled (server shutdown)' "$X_LOG")
	[ "$n" -ge 3 ] || fail "$n requests logged as cut by the shutdown: $log"
	# real timings: the cut requests ran for over a second
	expect_match "$(grep 'finish cancelled (server shutdown)' "$X_LOG" | head -1)" 'total [0-9]{4,}\.[0-9] ms' "timing"
}

@test "--max-concurrent-requests: one more is 429 with Retry-After; GETs are not counted" {
	serve_start M --max-concurrent-requests 1 --max-seqs 1
	curl -sN -o /dev/null -H 'Content-Type: application/json' \
		-d '{"prompt":"Once","max_tokens":900,"ignore_eos":true,"stream":true}' "$M_URL/v1/completions" &
	curl_pid=$!
	wait_gauge "$M_URL" atlas_http_handlers_running 1
	out=$(curl -si -H 'Content-Type: application/json' -d '{"prompt":"x","max_tokens":1}' "$M_URL/v1/completions")
	expect_match "$out" '^HTTP/1.1 429 ' "status"
	expect_contains "$out" 'Retry-After: 1'
	expect_contains "$out" '"type":"rate_limit_error"'
	expect_contains "$out" '--max-concurrent-requests'
	http GET "$M_URL/health"
	expect_eq "$status_code" 200
	kill "$curl_pid"
	wait "$curl_pid" || true
	wait_gauge "$M_URL" atlas_http_handlers_running 0
	http POST "$M_URL/v1/completions" '{"prompt":"x","max_tokens":1}'
	expect_eq "$status_code" 200 "after the first ended"
	serve_stop M
}

@test "--rate-limit-rpm per API key: 429 with Retry-After; another key has its own budget" {
	serve_start R --rate-limit-rpm 2 --api-key k-one --api-key k-two
	for i in 1 2; do
		http POST "$R_URL/v1/completions" '{"prompt":"x","max_tokens":1}' -H 'Authorization: Bearer k-one'
		expect_eq "$status_code" 200 "request $i"
	done
	out=$(curl -si -H 'Authorization: Bearer k-one' -H 'Content-Type: application/json' \
		-d '{"prompt":"x","max_tokens":1}' "$R_URL/v1/completions")
	expect_match "$out" '^HTTP/1.1 429 ' "third request"
	ra=$(printf '%s' "$out" | tr -d '\r' | sed -n 's/^Retry-After: //p')
	[ "$ra" -ge 1 ] && [ "$ra" -le 30 ] || fail "Retry-After '$ra' is not in 1..30"
	expect_contains "$out" '"code":"rate_limit_exceeded"'
	http POST "$R_URL/v1/messages" '{"max_tokens":1,"messages":[{"role":"user","content":"x"}]}' -H 'x-api-key: k-one'
	expect_eq "$status_code" 429 "the key, not the route"
	expect_contains "$body" '"type":"rate_limit_error"'
	http POST "$R_URL/v1/completions" '{"prompt":"x","max_tokens":1}' -H 'Authorization: Bearer k-two'
	expect_eq "$status_code" 200 "the other key"
	http GET "$R_URL/v1/models" "" -H 'Authorization: Bearer k-one'
	expect_eq "$status_code" 200 "GETs are not limited"
	serve_stop R
}

@test "--rate-limit-tpm: a client over its tokens per minute gets 429 with Retry-After until the bucket refills" {
	serve_start K --rate-limit-tpm 20
	http POST "$K_URL/v1/completions" '{"prompt":"Once upon a time","max_tokens":30,"ignore_eos":true}'
	expect_eq "$status_code" 200 "first request"
	out=$(curl -si -H 'Content-Type: application/json' -d '{"prompt":"x","max_tokens":1}' "$K_URL/v1/completions")
	expect_match "$out" '^HTTP/1.1 429 ' "over the budget"
	ra=$(printf '%s' "$out" | tr -d '\r' | sed -n 's/^Retry-After: //p')
	[ "$ra" -ge 30 ] && [ "$ra" -le 120 ] || fail "Retry-After '$ra' is not in 30..120 (about 35 tokens of debt at 20/min)"
	expect_contains "$out" 'rate-limit-tpm'
	expect_match "$(curl -s "$K_URL/metrics")" 'atlas_requests_total\{status="429"\} 1'
	serve_stop K
}

# loop_model DIR - a copy of the default model (links) whose chat
# template first runs an empty loop of 100,000 iterations
loop_model() {
	local f
	mkdir -p "$1"
	for f in "$DEFAULT_MODEL"/*; do
		[ "${f##*/}" = tokenizer_config.json ] || ln -s "$f" "$1/"
	done
	python3 - "$DEFAULT_MODEL/tokenizer_config.json" "$1/tokenizer_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["chat_template"] = "{% for i in range(100000) %}{% endfor %}" + c["chat_template"]
json.dump(c, open(sys.argv[2], "w"))
PY
}

@test "--template-max-steps and --template-max-output: a chat template over a limit is a 400 naming it; the server carries on" {
	local m=$BATS_TEST_TMPDIR/loop chat='{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}'
	loop_model "$m"
	serve_start L -m "$m" --template-max-steps 1000
	http POST "$L_URL/v1/chat/completions" "$chat"
	expect_error 400 messages "chat template line 1: template render exceeded 1000 steps"
	http POST "$L_URL/v1/messages" "$chat"
	expect_eq "$status_code" 400 "anthropic"
	expect_contains "$body" "exceeded 1000 steps"
	http POST "$L_URL/tokenize" '{"messages":[{"role":"user","content":"Hi"}]}'
	expect_eq "$status_code" 400 "tokenize"
	run -0 curl -s -m 5 "$L_URL/health"
	http POST "$L_URL/v1/completions" '{"prompt":"x","max_tokens":1}'
	expect_eq "$status_code" 200 "completions still served"
	serve_stop L
	# the default budget runs the loop
	serve_start L -m "$m" --template-max-output 200
	http POST "$L_URL/v1/chat/completions" "$chat"
	expect_eq "$status_code" 200 "default steps"
	expect_contains "$body" '"prompt_tokens":'
	# a rendered prompt over --template-max-output
	http POST "$L_URL/v1/chat/completions" "{\"messages\":[{\"role\":\"user\",\"content\":\"$(head -c 300 /dev/zero | tr '\0' a)\"}],\"max_tokens\":1}"
	expect_error 400 messages "exceeded 200 output bytes"
	serve_stop L
	run -2 atlas-serve --template-max-steps 0
	expect_contains "$output" "--template-max-steps"
	run -2 atlas-serve --template-max-output 1x
	expect_contains "$output" "--template-max-output"
}

@test "--help, the man page and the completions name every connection and limit flag" {
	run -0 atlas-serve --help
	for f in --max-connections --max-connections-per-ip --timeout --shutdown-timeout \
		--allowed-origins --max-concurrent-requests --rate-limit-rpm --rate-limit-tpm \
		--template-max-steps --template-max-output --template-max-memory; do
		expect_contains "$output" "$f" "usage"
		expect_contains "$(cat "$ATLAS_SRC/man/atlas-serve.1")" "${f//-/\\-}" "man page"
		expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-serve")" "$f" "bash completion"
		expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-serve")" "$f=" "zsh completion"
	done
	run -2 atlas-serve --timeout -1
	expect_contains "$output" "--timeout"
	run -2 atlas-serve --max-connections 0
	expect_contains "$output" "--max-connections"
}
