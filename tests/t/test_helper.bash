# test_helper.bash - shared setup for the bats tests of the atlas programs.
#
# tests/run-all exports ATLAS_SRC (repo root) and ATLAS_BUILD (build dir)
# and puts the build dir on PATH; when bats runs directly (bats tests/t/)
# both default to this checkout and its build/. Only sh tools a bare
# Debian has are used: no python, no jq.

bats_require_minimum_version 1.5.0

: "${ATLAS_SRC:=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}"
: "${ATLAS_BUILD:=$ATLAS_SRC/build}"
export ATLAS_SRC ATLAS_BUILD
export PATH="$ATLAS_BUILD:$PATH"

# The tests pin the model they mean; the caller's settings must not leak in.
export ATLAS_DEFAULT_MODEL="$ATLAS_SRC/models/default"
unset ATLAS_LOG

# Variables for the .bats files that load this helper.
# shellcheck disable=SC2034
DEFAULT_MODEL=$ATLAS_SRC/models/default
GOLDEN=$ATLAS_SRC/tests/fixtures/golden

# The sampling flags the pipe tests use, all samplers switched on.
SAMPLING_FLAGS="--temperature 0.9 --top-k 20 --top-p 0.9 --min-p 0.05 --repeat-penalty 1.1"

# fake_libcuda DIR [CC_FLAGS...] - build DIR/libcuda.so.1, a stand-in
# driver (CUDA 12.4) for the GPU-listing paths, to load with
# LD_LIBRARY_PATH=DIR. The flags shape it: -DNGPU=N GPUs (2), -D'NAME(d)=..'
# their names ("Fake GPU"), -D'MAJOR(d)=..' their compute capability major
# (9), -DPEER_ALL=0|1 adds cuDeviceCanAccessPeer (1: every pair, 0: only
# between GPUs 0 and 1). 80 GiB each.
fake_libcuda() {
	local d=$1
	shift
	mkdir -p "$d"
	cat >"$d/fake.c" <<'C'
#include <stddef.h>
#include <string.h>
#ifndef NGPU
#define NGPU 2
#endif
#ifndef NAME
#define NAME(d) "Fake GPU"
#endif
#ifndef MAJOR
#define MAJOR(d) 9
#endif
int cuInit(unsigned f) { return 0; }
int cuDriverGetVersion(int *v) { *v = 12040; return 0; }
int cuDeviceGetCount(int *n) { *n = NGPU; return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDeviceGetName(char *s, int n, int d) { strncpy(s, NAME(d), (size_t)n); return 0; }
int cuDeviceGetAttribute(int *v, int a, int d) { *v = a == 75 ? MAJOR(d) : 0; return 0; }
int cuDeviceTotalMem_v2(size_t *b, int d) { *b = (size_t)80 << 30; return 0; }
#ifdef PEER_ALL
int cuDeviceCanAccessPeer(int *c, int d, int p) { *c = PEER_ALL || (d < 2 && p < 2); return 0; }
#endif
C
	${CC:-cc} "$@" -shared -fPIC -o "$d/libcuda.so.1" "$d/fake.c"
}

# greedy_ids EXPECTED_JSON KEY - print the ids of "greedy": {"KEY": [...]}
# on one line, separated by single spaces (the pipe's id format). The file
# is pretty-printed with one number a line inside arrays.
greedy_ids() {
	awk -v key="\"$2\"" '
		/"greedy"/ { g = 1 }
		g && !a && index($0, key) { a = 1; next }
		a && /\]/ { exit }
		a { gsub(/[ \t,]/, ""); if ($0 != "") printf "%s%s", (n++ ? " " : ""), $0 }
		END { print "" }' "$1"
}

# model_copy SRC NAME - copy a model directory under the test's temporary
# directory (to edit it there) and print the copy's path.
model_copy() {
	cp -r "$1" "$BATS_TEST_TMPDIR/$2"
	printf '%s\n' "$BATS_TEST_TMPDIR/$2"
}

# count_words STRING - number of space-separated words (ids on a line).
count_words() {
	printf '%s\n' "$1" | awk '{ print NF }'
}

# json_field LINE KEY - the raw value of a flat JSON field: a number, or a
# string with its quotes (enough for atlas-run's own one-line objects).
json_field() {
	printf '%s\n' "$1" | sed -n 's/.*"'"$2"'": *\("\([^"\\]\|\\.\)*"\|[^,}]*\).*/\1/p'
}

# Assertions that say what they expected on failure; bats shows their
# output along with the failing line.
expect_eq() { # ACTUAL EXPECTED [WHAT]
	if [ "$1" != "$2" ]; then
		printf '%s differs\n  expected: %s\n  actual:   %s\n' "${3:-value}" "$2" "$1" >&2
		return 1
	fi
}

expect_contains() { # HAYSTACK NEEDLE [WHAT]
	case $1 in
	*"$2"*) return 0 ;;
	esac
	printf '%s does not contain "%s":\n%s\n' "${3:-text}" "$2" "$1" >&2
	return 1
}

expect_match() { # TEXT ERE [WHAT]
	if ! printf '%s\n' "$1" | grep -Eq -- "$2"; then
		printf '%s does not match /%s/:\n%s\n' "${3:-text}" "$2" "$1" >&2
		return 1
	fi
}

expect_empty() { # TEXT [WHAT]
	if [ -n "$1" ]; then
		printf '%s is not empty:\n%s\n' "${2:-text}" "$1" >&2
		return 1
	fi
}

# expect_same_file A B - byte-for-byte equality, with a dump when not.
expect_same_file() {
	if ! cmp "$1" "$2" >&2; then
		echo "--- $1" >&2
		od -c "$1" | head -20 >&2
		echo "--- $2" >&2
		od -c "$2" | head -20 >&2
		return 1
	fi
}

# The one-line timing summary atlas-run prints to stderr per prompt.
TIMING_RE='^atlas-run: prompt [0-9]+ tokens in [0-9.]+ ms \([0-9.]+ tok/s\); generated [0-9]+ tokens in [0-9.]+ ms \([0-9.]+ tok/s\); first token after [0-9.]+ ms'

# --- the mock Hub (tests/hubmock/hubmock.py) for the atlas-fetch tests ----

# hub_fixture - build the fixture repository test/tiny under
# $BATS_TEST_TMPDIR/hub: revision main is the golden qwen3 model plus a
# pytorch_model.bin duplicate and a README; revision v1 is golden llama3.
hub_fixture() {
	local h=$BATS_TEST_TMPDIR/hub f
	mkdir -p "$h/main/sub" "$h/v1"
	for f in config.json generation_config.json tokenizer.json tokenizer_config.json \
		model.safetensors; do
		cp "$GOLDEN/qwen3/$f" "$h/main/$f"
		cp "$GOLDEN/llama3/$f" "$h/v1/$f"
	done
	cp "$GOLDEN/qwen3/model.safetensors" "$h/main/pytorch_model.bin"
	printf '# tiny\n' >"$h/main/README.md"
	printf 'nested\n' >"$h/main/sub/notes.txt"
}

# hub_start [ENV=VALUE...] [-- MOCK-ARGS...] - start the mock Hub with the
# given fault variables, serving test/tiny (main, v1) and the gated
# test/gated (token "secret"); export HF_ENDPOINT and HF_HUB_CACHE (a fresh
# cache under the test's directory unless already set). Requests are
# logged to $HUB_LOG.
hub_start() {
	local h=$BATS_TEST_TMPDIR/hub i
	[ -d "$h/main" ] || hub_fixture
	HUB_LOG=$BATS_TEST_TMPDIR/hub.log
	: >"$HUB_LOG"
	rm -f "$BATS_TEST_TMPDIR/hub.port"
	env "$@" python3 "$ATLAS_SRC/tests/hubmock/hubmock.py" \
		--repo "test/tiny@main=$h/main" --repo "test/tiny@v1=$h/v1" \
		--repo "test/gated@main=$h/v1" --gated test/gated --token secret \
		--log "$HUB_LOG" >"$BATS_TEST_TMPDIR/hub.port" 2>"$BATS_TEST_TMPDIR/hub.err" &
	HUB_PID=$!
	for i in $(seq 100); do
		[ -s "$BATS_TEST_TMPDIR/hub.port" ] && break
		sleep 0.05
	done
	HUB_PORT=$(head -n 1 "$BATS_TEST_TMPDIR/hub.port")
	[ -n "$HUB_PORT" ] || { cat "$BATS_TEST_TMPDIR/hub.err" >&2; return 1; }
	export HF_ENDPOINT=http://127.0.0.1:$HUB_PORT
	: "${HF_HUB_CACHE:=$BATS_TEST_TMPDIR/cache}"
	export HF_HUB_CACHE HUB_LOG
	# fast retries in tests; the real default is one second, doubling
	export ATLAS_HUB_BACKOFF_MS=20
	unset HF_TOKEN HF_HUB_OFFLINE HF_HOME HF_TOKEN_PATH
}

# hub_stop - stop the mock Hub started by hub_start (if any).
hub_stop() {
	if [ -n "${HUB_PID:-}" ]; then
		kill "$HUB_PID" 2>/dev/null || true
		wait "$HUB_PID" 2>/dev/null || true
		HUB_PID=
	fi
}

# hub_requests PATTERN - how many logged requests match the ERE.
hub_requests() {
	grep -Ec -- "$1" "$HUB_LOG" || true
}
