#!/usr/bin/env bats
# 2096-run-draft-model.bats - atlas-run --speculative draft --draft-model M
# on the CPU, with the shipped default model as the model and as its own
# draft (so every greedy draft is the model's token, its repetition
# penalty included, drawn on the host or by the backend): greedy output byte for byte what it is without
# drafts, alone, under a grammar and for many prompts at once; seeded
# output the plain output; the timing line's counts (every draft
# accepted); --draft-model implies the mode; the refusals (no draft model,
# a draft model for another mode, a tokenizer that differs, a missing
# directory, --tp 2).

load 2090-spec-helper

DRAFT_RE='; speculative \(draft\): ([0-9]+) of ([0-9]+) drafts accepted \([0-9]+%\), ([0-9]+\.[0-9]{2}) tokens a step$'

setup() {
	DM=$ATLAS_SRC/models/default
}

@test "--help, the man page and the completions list --draft-model" {
	run -0 --separate-stderr atlas-run --help
	expect_contains "$output" "--draft-model M" "usage"
	expect_contains "$output" "draft (drafts from --draft-model) or mtp" "usage"
	local man
	man=$(cat "$ATLAS_SRC/man/atlas-run.1")
	expect_contains "$man" '.BI \-\-draft\-model " M"' "man"
	expect_contains "$(cat "$ATLAS_SRC/completions/bash/atlas-run")" "--draft-model" "bash"
	expect_contains "$(cat "$ATLAS_SRC/completions/zsh/_atlas-run")" "--draft-model=" "zsh"
}

@test "greedy: the same bytes with the model as its own draft, every draft accepted" {
	gen
	gen --draft-model "$DM"
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.2"
	expect_match "$(cat "$BATS_TEST_TMPDIR/out.1")" '[^[:space:]]' "greedy text"
	local line
	line=$(printf '%s\n' "$stderr" | grep '^atlas-run: prompt ')
	expect_match "$line" "$DRAFT_RE" "timing line"
	[[ $line =~ $DRAFT_RE ]]
	local acc=${BASH_REMATCH[1]} drafted=${BASH_REMATCH[2]} per=${BASH_REMATCH[3]}
	[ "$drafted" -gt 0 ] || { echo "no drafts: $line" >&2; false; }
	expect_eq "$acc" "$drafted" "accepted drafts"
	# four drafts a step, all kept: well over two tokens a step
	[[ $per =~ ^[3-5]\. ]] || { echo "tokens a step: $per" >&2; false; }
	# --speculative draft said as well, and --num-draft 1 and 8
	gen --speculative draft --draft-model "$DM" --num-draft 1
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.3"
	gen --draft-model "$DM" --num-draft 8
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.4"
	# without the model's repetition penalty (1.1 in its generation
	# config) the draft model's backend draws the drafts: the same holds
	gen --repeat-penalty 1
	gen --repeat-penalty 1 --draft-model "$DM"
	expect_same_file "$BATS_TEST_TMPDIR/out.5" "$BATS_TEST_TMPDIR/out.6"
	line=$(printf '%s\n' "$stderr" | grep '^atlas-run: prompt ')
	[[ $line =~ $DRAFT_RE ]] || { echo "timing line: $line" >&2; false; }
	[ "${BASH_REMATCH[2]}" -gt 0 ]
	expect_eq "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "accepted drafts without the penalty"
}

@test "the log line names the draft model; --batch-invariant gives the same bytes" {
	gen --batch-invariant
	gen --batch-invariant -v --draft-model "$DM"
	expect_contains "$stderr" "speculative draft with draft model $DM, batch-invariant" "log line"
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.2"
}

@test "under a grammar (--regex) the draft drafts inside it, and the output is the same" {
	local re='[0-9a-z =&()\t]*'
	gen --regex "$re"
	gen --regex "$re" --draft-model "$DM"
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.2"
	local line
	line=$(printf '%s\n' "$stderr" | grep '^atlas-run: prompt ')
	[[ $line =~ $DRAFT_RE ]] || { echo "timing line: $line" >&2; false; }
	[ "${BASH_REMATCH[2]}" -gt 0 ]
	expect_eq "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "accepted drafts under the grammar"
}

@test "seeded sampling: the same tokens with the draft model as without" {
	gen --temperature 0.8 --seed 5
	gen --temperature 0.8 --seed 5 --draft-model "$DM"
	expect_same_file "$BATS_TEST_TMPDIR/out.1" "$BATS_TEST_TMPDIR/out.2"
	expect_match "$stderr" "$DRAFT_RE" "timing line"
}

@test "-f: many prompts at once (--parallel 4) print the same with a draft model" {
	local f=$BATS_TEST_TMPDIR/prompts.txt d=$BATS_TEST_TMPDIR
	printf '%s\n' 'a b c a b c a b c' 'for i in x: print(i)' 'Once upon a time' \
		'the cat sat on the mat' 'hello hello' 'x = 1; y = 2;' >"$f"
	atlas-run --device cpu --temperature 0 --ignore-eos -n 24 --parallel 4 -f "$f" \
		>"$d/plain" 2>"$d/plain.err"
	atlas-run --device cpu --temperature 0 --ignore-eos -n 24 --parallel 4 \
		--draft-model "$DM" -f "$f" >"$d/spec" 2>"$d/spec.err"
	stderr=$(cat "$d/spec.err")
	expect_same_file "$d/plain" "$d/spec"
	expect_match "$(cat "$d/spec")" '[^[:space:]]' "batch text"
	expect_contains "$stderr" "6 prompts (0 failed)" "summary"
	expect_eq "$(printf '%s\n' "$stderr" | grep -c 'speculative (draft)')" 6 "timing lines with drafts"
}

@test "--speculative draft without --draft-model, or --draft-model with ngram, exits 2" {
	run -2 --separate-stderr atlas-run --device cpu --speculative draft -p hi
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "--speculative draft needs --draft-model M" "stderr"
	run -2 --separate-stderr atlas-run --device cpu --speculative ngram --draft-model "$DM" -p hi
	expect_contains "$stderr" "--draft-model is for --speculative draft, not ngram" "stderr"
	run -2 --separate-stderr atlas-run --device cpu --speculative none --draft-model "$DM" -p hi
	expect_contains "$stderr" "--draft-model is for --speculative draft, not none" "stderr"
}

@test "a draft model with another tokenizer, a missing one, or --tp 2: exit 1 naming it" {
	# the default model again, but two tokens' ids swapped (300 and 301)
	local other=$BATS_TEST_TMPDIR/other f
	mkdir "$other"
	for f in config.json generation_config.json model.safetensors tokenizer_config.json; do
		ln -s "$DM/$f" "$other/$f"
	done
	sed 's/"Ġis": 300,/"Ġis": 301,/; s/"ic": 301,/"ic": 300,/' "$DM/tokenizer.json" \
		>"$other/tokenizer.json"
	expect_eq "$(cmp "$DM/tokenizer.json" "$other/tokenizer.json" | wc -l)" 1 "the change"
	run -1 --separate-stderr atlas-run --device cpu --draft-model "$other" -p hi
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "the draft model $other's tokenizer differs from the model's at id 300" "stderr"
	expect_contains "$stderr" "must share the model's tokenizer" "stderr"
	run -1 --separate-stderr atlas-run --device cpu --draft-model "$BATS_TEST_TMPDIR/none" -p hi
	expect_contains "$stderr" "no such model directory" "stderr"
	run -1 --separate-stderr atlas-run --device cpu --tp 2 --draft-model "$DM" -p hi
	expect_contains "$stderr" "a draft model with tensor parallelism is not in Atlas yet" "stderr"
}
