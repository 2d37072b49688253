#!/usr/bin/env bats
# 2070-run-batch.bats - many prompts at once: -f, --jsonl and the pipe
# stage generate run every prompt through the scheduler together
# (--parallel), write the outputs in input order, each exactly what -p
# prints for that prompt alone, report bad lines by number while the
# others complete, and reuse equal prefixes from the prefix cache.

load test_helper

setup() {
	P=$BATS_TEST_TMPDIR
	printf '%s\n' "Once upon a time" "The meaning of life is" "hello" "A fortune:" \
		"Never trust a" "The best way to predict the future" "To be or not" "Why" >"$P/prompts"
}

@test "-f: every output is what -p prints alone, in input order (greedy and seeded)" {
	local args
	for args in "--temperature 0" "--temperature 1 --seed 11"; do
		# shellcheck disable=SC2086
		atlas-run -f "$P/prompts" -n 10 $args -q >"$P/out"
		: >"$P/want"
		while IFS= read -r p; do
			# shellcheck disable=SC2086
			atlas-run -p "$p" -n 10 $args -q >>"$P/want"
		done <"$P/prompts"
		expect_same_file "$P/out" "$P/want"
	done
}

@test "--parallel 1 and --parallel 3 give the same output as the default" {
	atlas-run -f "$P/prompts" -n 8 --temperature 0.9 --seed 3 -q >"$P/all"
	atlas-run -f "$P/prompts" -n 8 --temperature 0.9 --seed 3 -q --parallel 1 >"$P/one"
	atlas-run -f "$P/prompts" -n 8 --temperature 0.9 --seed 3 -q --parallel 3 >"$P/three"
	expect_same_file "$P/one" "$P/all"
	expect_same_file "$P/three" "$P/all"
}

@test "--jsonl -f: one object per prompt in order, the text of -p alone" {
	local i ps want
	mapfile -t ps <"$P/prompts"
	sed 's/.*/{"prompt": "&"}/' "$P/prompts" >"$P/in.jsonl"
	run -0 --separate-stderr atlas-run --jsonl -f "$P/in.jsonl" -n 6 --temperature 0 -q
	expect_eq "${#lines[@]}" 8 "objects"
	for i in "${!ps[@]}"; do
		expect_eq "$(json_field "${lines[$i]}" prompt)" "\"${ps[$i]}\"" "prompt $i"
		want=$(atlas-run -p "${ps[$i]}" -n 6 --temperature 0 -q </dev/null)
		expect_eq "$(json_field "${lines[$i]}" text | jq -r .)" "$want" "text $i"
	done
}

@test "generate: many id lines at once, each what it gives alone" {
	atlas-run tokenize <"$P/prompts" >"$P/ids"
	atlas-run generate -n 8 --seed 5 --temperature 1 --echo <"$P/ids" >"$P/out" 2>/dev/null
	: >"$P/want"
	while IFS= read -r l; do
		printf '%s\n' "$l" | atlas-run generate -n 8 --seed 5 --temperature 1 --echo -q >>"$P/want"
	done <"$P/ids"
	expect_same_file "$P/out" "$P/want"
	expect_eq "$(wc -l <"$P/out")" 8 "lines"
}

@test "-f: an empty line and invalid UTF-8 are reported by line number; the rest complete, exit 1" {
	printf 'hello\n\nOnce upon a time\nbad \377 byte\nWhy\n' >"$P/bad"
	run -1 --separate-stderr atlas-run -f "$P/bad" -n 4 --temperature 0
	expect_contains "$stderr" "$P/bad:2: empty line" "stderr"
	expect_contains "$stderr" "$P/bad:4: the prompt is not valid UTF-8 (byte 5)" "stderr"
	expect_eq "$(grep -Ec "$TIMING_RE" <<<"$stderr")" 3 "prompts that ran"
	expect_eq "${#lines[@]}" 3 "output lines"
	expect_eq "${lines[2]}" "$(atlas-run -p Why -n 4 --temperature 0 -q)" "the last prompt's output"
}

@test "--jsonl -f: a malformed line gets an error object in its place; exit 1" {
	printf '{"prompt": "hi"}\n{"prompt": 7}\n{"prompt": "Why"}\n' >"$P/in.jsonl"
	run -1 --separate-stderr atlas-run --jsonl -f "$P/in.jsonl" -n 3 --temperature 0 -q
	expect_eq "${#lines[@]}" 3 "objects"
	expect_match "${lines[1]}" '^\{"error": ".*in.jsonl:2: ' "the bad line's object"
	expect_match "${lines[2]}" '"prompt": "Why"' "the line after it"
	expect_contains "$stderr" "in.jsonl:2:" "stderr"
}

@test "generate: a bad id line is reported by number; the others complete" {
	printf '1 2 3\n1 x 3\n4 5 6\n' | {
		run -1 --separate-stderr atlas-run generate -n 3 --temperature 0
		expect_contains "$stderr" "line 2:" "stderr"
		expect_eq "${#lines[@]}" 2 "outputs"
	}
}

@test "repeated prompts come from the prefix cache with the same text; --no-prefix-cache computes them" {
	local long="The meaning of life is a long story about many things that happen to people again and again"
	printf '{"prompt": "%s"}\n' "$long" "$long" "$long" >"$P/same.jsonl"
	run -0 --separate-stderr atlas-run --jsonl -f "$P/same.jsonl" -n 8 --temperature 0 -q
	local cached=("${lines[@]}")
	expect_eq "$(json_field "${cached[0]}" cached_tokens)" 0 "first"
	[ "$(json_field "${cached[2]}" cached_tokens)" -ge 16 ]
	run -0 --separate-stderr atlas-run --jsonl -f "$P/same.jsonl" -n 8 --temperature 0 -q --no-prefix-cache
	local i
	for i in 0 1 2; do
		expect_eq "$(json_field "${lines[$i]}" cached_tokens)" 0 "uncached $i"
		expect_eq "$(json_field "${lines[$i]}" text)" "$(json_field "${cached[$i]}" text)" "text $i"
	done
}

@test "nothing but the timing lines and a summary on stderr when it is not a terminal" {
	run -0 --separate-stderr atlas-run -f "$P/prompts" -n 4
	expect_eq "$(grep -Ec "$TIMING_RE" <<<"$stderr")" 8 "timing lines"
	expect_eq "$(grep -c 'prompts (0 failed)' <<<"$stderr")" 1 "summary"
	expect_eq "$(printf '%s\n' "$stderr" | wc -l)" 9 "stderr lines"
	[[ "$stderr" != *$'\r'* ]]
}

@test "--parallel: a usage error below 1" {
	run -2 --separate-stderr atlas-run -f "$P/prompts" --parallel 0
	expect_contains "$stderr" "--parallel" "stderr"
}

@test "generate: a NUL byte in an id line is reported by line number, not read as a shorter line" {
	printf '1 2\0003\n4 5 6\n' | {
		run -1 --separate-stderr atlas-run generate -n 2 --temperature 0 -q
		expect_contains "$stderr" "line 1: the line has a NUL byte" "stderr"
		expect_eq "${#lines[@]}" 1 "outputs"
	}
}
