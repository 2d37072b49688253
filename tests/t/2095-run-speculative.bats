#!/usr/bin/env bats
# 2095-run-speculative.bats - atlas-run --speculative ngram (prompt-lookup
# drafts, verified in one step) and --num-draft K on the shipped default
# model on the CPU: greedy output byte for byte what it is without
# speculation, for any K, under a grammar, for many prompts at once
# (-f) and over two tensor-parallel ranks; the timing line's draft counts; seeded sampling reproducible; and
# the refusals (mtp on a checkpoint without an MTP head: exit 1; an
# unknown mode, --num-draft out of 1..16 or without --speculative: exit
# 2).

load 2090-spec-helper

# The end of the timing line with --speculative ngram.
SPEC_RE='; speculative \(ngram\): [0-9]+ of [0-9]+ drafts accepted \([0-9]+%\), [0-9]+\.[0-9]{2} tokens a step$'

# drafted STDERR - the drafts proposed, summed over the timing lines.
drafted() {
	printf '%s\n' "$1" | sed -n 's/.*speculative (ngram): [0-9]* of \([0-9]*\) drafts.*/\1/p' |
		awk '{ n += $1 } END { print n + 0 }'
}

@test "--help, the man page and the completions list --speculative, its values and --num-draft" {
	run -0 --separate-stderr atlas-run --help
	expect_contains "$output" "--speculative MODE" "usage"
	expect_contains "$output" "none (default), ngram" "usage"
	expect_contains "$output" "--num-draft K" "usage"
	expect_contains "$output" "1..16 (default 4)" "usage"
	local man
	man=$(cat "$ATLAS_SRC/man/atlas-run.1")
	expect_contains "$man" '.BI \-\-speculative " MODE"' "man"
	expect_contains "$man" '.BI \-\-num\-draft " K"' "man"
	expect_contains "$man" "drafts accepted" "man"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-run")" "--speculative" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-run")" "--num-draft" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-run")" '"none ngram draft mtp"' "bash values"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-run")" "--speculative=" "zsh"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-run")" "--num-draft=" "zsh"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-run")" ":mode:(none ngram draft mtp)" "zsh values"
}

@test "the bash completion offers the modes after --speculative" {
	# shellcheck source=/dev/null
	source "$ATLAS_SRC/completions/bash/atlas-run"
	COMP_WORDS=(atlas-run --speculative "")
	COMP_CWORD=2
	COMPREPLY=()
	_atlas_run
	expect_eq "${COMPREPLY[*]}" "none ngram draft mtp" "completions of --speculative"
	COMP_WORDS=(atlas-run --num-d)
	COMP_CWORD=1
	COMPREPLY=()
	_atlas_run
	expect_eq "${COMPREPLY[*]}" "--num-draft" "completions of --num-d"
}

@test "greedy: the same bytes with --speculative ngram as without, for --num-draft 1, 4 and 8" {
	gen
	[[ $stderr != *speculative* ]] || { echo "plain run's stderr: $stderr" >&2; false; }
	gen --speculative ngram
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.2"
	gen --speculative ngram --num-draft 1
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.3"
	gen --speculative ngram --num-draft 8
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.4"
	gen --speculative none
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.5"
	[[ $stderr != *speculative* ]] || { echo "--speculative none's stderr: $stderr" >&2; false; }
	# the output is not empty: the comparisons above compare something
	expect_match "$(cat "$BATS_TEST_TMPDIR/out.1")" '[^[:space:]]' "greedy text"
}

@test "--tp 2 (two thread ranks): the same bytes with drafts as one rank without" {
	gen
	gen --tp 2 --speculative ngram
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.2"
	expect_match "$stderr" "$SPEC_RE" "timing line"
	[ "$(drafted "$stderr")" -gt 0 ]
}

@test "--batch-invariant: the mode is logged, and drafts give the same bytes in it" {
	gen --batch-invariant -v
	expect_contains "$stderr" "speculative none, batch-invariant" "log line"
	gen --batch-invariant -v --speculative ngram
	expect_contains "$stderr" "speculative ngram, batch-invariant" "log line"
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.2"
	[ "$(drafted "$stderr")" -gt 0 ]
	run -0 --separate-stderr atlas-run --help
	expect_contains "$output" "--batch-invariant" "usage"
	expect_contains "$(cat "$ATLAS_SRC/man/atlas-run.1")" '\-\-batch\-invariant' "man"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-run")" "--batch-invariant" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-run")" "--batch-invariant[" "zsh"
}

@test "the timing line counts the drafts, and this prompt has some accepted" {
	gen -v --speculative ngram
	expect_contains "$stderr" "speculative (ngram)" "stderr"
	expect_contains "$stderr" "drafts accepted" "stderr"
	expect_contains "$stderr" "generated 48 tokens" "stderr"
	local line
	line=$(printf '%s\n' "$stderr" | grep '^atlas-run: prompt ')
	expect_match "$line" "$TIMING_RE" "timing line"
	expect_match "$line" "$SPEC_RE" "timing line"
	# drafts were proposed and kept: more than one token a step
	expect_match "$line" 'ngram\): [1-9][0-9]* of [1-9][0-9]* drafts accepted' "timing line"
	expect_match "$line" ', (1\.0[1-9]|1\.[1-9][0-9]|[2-9]\.[0-9]{2}) tokens a step$' "timing line"
	# -q still drops the whole line
	gen -q --speculative ngram
	expect_empty "$stderr" "stderr with -q"
}

@test "under a grammar (--regex) greedy output is the same with drafts" {
	local re='[0-9a-z =&()\t]*'
	gen --regex "$re"
	gen --regex "$re" --speculative ngram
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.2"
	local d
	d=$(drafted "$stderr")
	[ "$d" -gt 0 ] || { echo "no drafts under the grammar: $stderr" >&2; false; }
}

@test "seeded sampling with drafts is reproducible" {
	gen --temperature 0.8 --seed 3 --speculative ngram
	expect_contains "$stderr" "generated 48 tokens" "stderr"
	gen --temperature 0.8 --seed 3 --speculative ngram
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.2"
}

@test "-f: many prompts at once (--parallel 4) print the same with --speculative ngram" {
	local f=$BATS_TEST_TMPDIR/prompts.txt
	printf '%s\n' 'a b c a b c a b c a b c' \
		'for i in x: print(i) for i in x: print(i)' \
		'Once upon a time, once upon a time, once upon a time' \
		'the cat sat on the mat, the cat sat on the mat' \
		'hello hello hello hello' \
		'x = 1; y = 2; x = 1; y = 2; x = 1;' >"$f"
	local d=$BATS_TEST_TMPDIR n
	atlas-run --device cpu --temperature 0 --ignore-eos -n 32 --parallel 4 -f "$f" \
		>"$d/plain" 2>"$d/plain.err"
	expect_contains "$(cat "$d/plain.err")" "6 prompts (0 failed)" "summary"
	atlas-run --device cpu --temperature 0 --ignore-eos -n 32 --parallel 4 \
		--speculative ngram -f "$f" >"$d/spec" 2>"$d/spec.err"
	stderr=$(cat "$d/spec.err")
	expect_same_file "$d/plain" "$d/spec"
	expect_match "$(cat "$d/spec")" '[^[:space:]]' "batch text"
	expect_contains "$stderr" "6 prompts (0 failed)" "summary"
	expect_eq "$(printf '%s\n' "$stderr" | grep -c 'speculative (ngram)')" 6 "timing lines with drafts"
	n=$(drafted "$stderr")
	[ "$n" -gt 0 ] || { echo "no drafts in the batch: $stderr" >&2; false; }
}

@test "--speculative mtp on a checkpoint without an MTP head: exit 1 naming it" {
	run -1 --separate-stderr atlas-run --device cpu --speculative mtp -p hi
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "cannot load the MTP head of" "stderr"
	expect_contains "$stderr" "no mtp.fc.weight" "stderr"
	run -2 --separate-stderr atlas-run --device cpu --speculative mtp --draft-model x -p hi
	expect_contains "$stderr" "--draft-model is for --speculative draft, not mtp" "stderr"
}

@test "an unknown mode exits 2 naming --speculative and the modes" {
	run -2 --separate-stderr atlas-run --device cpu --speculative bogus -p hi
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "--speculative" "stderr"
	expect_contains "$stderr" "'bogus'" "stderr"
	expect_contains "$stderr" "(none, ngram, draft, mtp)" "stderr"
	run -2 --separate-stderr atlas-run --device cpu --speculative NGRAM -p hi
	expect_contains "$stderr" "'NGRAM'" "stderr"
	run -2 --separate-stderr atlas-run -p hi --speculative
	expect_contains "$stderr" "speculative" "stderr"
}

@test "--num-draft outside 1..16, or without --speculative ngram, exits 2" {
	local k
	for k in 0 17 x; do
		run -2 --separate-stderr atlas-run --device cpu --speculative ngram --num-draft "$k" -p hi
		expect_empty "$output" "stdout"
		expect_contains "$stderr" "--num-draft" "stderr (--num-draft $k)"
	done
	expect_contains "$stderr" "'x' is not an integer" "stderr"
	run -2 --separate-stderr atlas-run --device cpu --speculative ngram --num-draft 17 -p hi
	expect_contains "$stderr" "17 is out of range (1..16)" "stderr"
	run -2 --separate-stderr atlas-run --device cpu --num-draft 4 -p hi
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "--num-draft needs --speculative ngram" "stderr"
	run -2 --separate-stderr atlas-run --device cpu --speculative none --num-draft 4 -p hi
	expect_contains "$stderr" "--num-draft needs --speculative ngram" "stderr"
	# the bounds themselves are accepted
	run -0 --separate-stderr atlas-run --device cpu -q --speculative ngram --num-draft 16 -n 2 -p hi
	run -0 --separate-stderr atlas-run --device cpu -q --speculative ngram --num-draft 1 -n 2 -p hi
}
