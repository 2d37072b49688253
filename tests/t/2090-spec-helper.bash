# 2090-spec-helper.bash - what the atlas-run speculative-decoding bats
# files share: a prompt that repeats itself (so its continuation has
# n-grams to look up, and the default model then repeats a digit) and
# gen, a greedy run of it.

load test_helper

PROMPT=$'def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n'

# gen [ARGS...] - 48 greedy tokens of $PROMPT on the CPU with ARGS; stdout
# goes byte for byte to $BATS_TEST_TMPDIR/out.N (N counts the calls, from
# 1), stderr to out.N.err, and both are also in $output and $stderr.
n_gen=0
gen() {
	n_gen=$((n_gen + 1))
	local o=$BATS_TEST_TMPDIR/out.$n_gen rc=0
	atlas-run --device cpu --temperature 0 --ignore-eos -n 48 "$@" -p "$PROMPT" \
		>"$o" 2>"$o.err" || rc=$?
	output=$(cat "$o")
	stderr=$(cat "$o.err")
	if [ "$rc" != 0 ]; then
		printf 'atlas-run %s exited %s:\n%s\n' "$*" "$rc" "$stderr" >&2
		return 1
	fi
}
