# 3000-serve-helper.bash - starting, calling and stopping atlas-serve in
# the 3xxx bats tests. Servers bind 127.0.0.1 on a free port the kernel
# picks (--port 0; the port is read back from the log) and are killed in
# teardown. Only curl, sed, grep and awk are used.

load test_helper

# serve_start NAME [ARGS...] - start a server in the background, wait
# until it says ready; sets NAME_PID, NAME_URL, NAME_LOG (exported).
serve_start() {
	local name=$1 log pid port i
	shift
	log=$BATS_FILE_TMPDIR/$name.log
	atlas-serve --port 0 "$@" >/dev/null 2>"$log" 3>&- &
	pid=$!
	for i in $(seq 300); do
		grep -q '^atlas-serve: ready' "$log" && break
		grep -q 'listening on' "$log" && [ -n "${SERVE_NO_WAIT:-}" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9][0-9]*\).*/\1/p' "$log")
	if [ -z "$port" ]; then
		cat "$log" >&2
		return 1
	fi
	eval "export ${name}_PID=$pid ${name}_URL=http://127.0.0.1:$port ${name}_LOG=$log"
}

# serve_stop NAME - stop it (SIGTERM) and wait.
serve_stop() {
	local pid
	eval "pid=\${$1_PID:-}"
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# http METHOD URL [BODY] [CURL ARGS...] - sets $status_code and $body.
http() {
	local method=$1 url=$2 data=${3-}
	shift 2
	[ $# -gt 0 ] && shift
	local out=$BATS_TEST_TMPDIR/http.$$
	if [ -n "$data" ]; then
		status_code=$(curl -s -o "$out" -w '%{http_code}' -X "$method" \
			-H 'Content-Type: application/json' --data-binary "$data" "$@" "$url")
	else
		status_code=$(curl -s -o "$out" -w '%{http_code}' -X "$method" "$@" "$url")
	fi
	body=$(cat "$out")
}

# expect_error STATUS PARAM_OR_EMPTY TEXT - the last reply is an error in
# the OpenAI shape with that status, param and message text.
expect_error() {
	expect_eq "$status_code" "$1" "HTTP status"
	expect_contains "$body" '"error":{"message":"' "error body"
	expect_contains "$body" '"type":"' "error body"
	expect_contains "$body" '"code":' "error body"
	if [ -n "$2" ]; then
		expect_contains "$body" "\"param\":\"$2\"" "error param"
	else
		expect_contains "$body" '"param":null' "error param"
	fi
	expect_contains "$body" "$3" "error message"
}

# completion_text JSON - the "text" of the first choice (raw JSON string body).
completion_text() {
	printf '%s\n' "$1" | sed -n 's/.*"text":"\(\([^"\\]\|\\.\)*\)".*/\1/p'
}

# metric URL NAME - the value of a metric line without labels.
metric() {
	curl -s "$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'
}

# choices JSON - the choices of a completion (text, logprobs, finish).
choices() {
	printf '%s\n' "$1" | sed 's/.*"choices":\[\(.*\)\],"usage".*/\1/'
}

# alone_vs_together URL PROMPT BASE - four greedy completions of "PROMPT i"
# (i = 0..3, BASE + 4i tokens, logprobs), one after another and then all
# at once: each answer (choices) must be the same both ways. PROMPT is a
# JSON string body (its backslashes escapes).
alone_vs_together() {
	local url=$1 prompt=$2 base=$3 d=$BATS_TEST_TMPDIR mode i
	for mode in alone together; do
		mkdir -p "$d/$mode"
		: >"$d/$mode.cfg"
		for i in 0 1 2 3; do
			printf 'url = "%s/v1/completions"\nheader = "Content-Type: application/json"\ndata = "{\\"prompt\\":\\"%s %d\\",\\"max_tokens\\":%d,\\"temperature\\":0,\\"ignore_eos\\":true,\\"logprobs\\":1}"\noutput = "%s/%d.json"\n' \
				"$url" "${prompt//\\/\\\\}" "$i" $((base + 4 * i)) "$d/$mode" "$i" >>"$d/$mode.cfg"
			[ "$i" = 3 ] || echo next >>"$d/$mode.cfg"
		done
	done
	curl -s -K "$d/alone.cfg"
	curl -s -Z --parallel-immediate --parallel-max 4 -K "$d/together.cfg"
	for i in 0 1 2 3; do
		expect_contains "$(cat "$d/alone/$i.json")" '"top_logprobs":[{' "response $i"
		choices "$(cat "$d/alone/$i.json")" >"$d/alone/$i"
		choices "$(cat "$d/together/$i.json")" >"$d/together/$i"
		expect_same_file "$d/alone/$i" "$d/together/$i"
	done
}
