#!/usr/bin/env bats
# 2060-run-tp.bats - atlas-run --tp N: tensor parallelism over N thread
# ranks on the CPU gives the output of one rank (prompts, sampling, the
# generate stage, golden greedy tokens), and the refusals: bad N, heads
# that N does not divide, CUDA with fewer GPUs than N (a fake driver).

load test_helper

@test "--help lists --tp" {
	run -0 --separate-stderr atlas-run --help
	expect_contains "$output" "--tp N"
}

@test "--tp 2 and 4 on the cpu print what one rank prints (greedy and sampled)" {
	run -0 --separate-stderr atlas-run --device cpu -q -p "The meaning of life is" \
		--temperature 0 -n 24
	local one=$output
	expect_contains "$one" "Mencken"
	for n in 1 2 4; do
		run -0 --separate-stderr atlas-run --device cpu -q --tp "$n" \
			-p "The meaning of life is" --temperature 0 -n 24
		expect_eq "$output" "$one" "--tp $n greedy"
	done
	run -0 --separate-stderr atlas-run --device cpu -q -p "Once upon a time" -p "A fortune" \
		-n 32 --seed 7 $SAMPLING_FLAGS
	one=$output
	run -0 --separate-stderr atlas-run --device cpu -q --tp 2 -p "Once upon a time" \
		-p "A fortune" -n 32 --seed 7 $SAMPLING_FLAGS
	expect_eq "$output" "$one" "--tp 2 sampled, two prompts"
}

@test "--tp 2: the generate stage gives a golden model's transformers tokens" {
	local want prompt
	prompt=$(greedy_ids "$GOLDEN/mistral/expected.json" prompt)
	want=$(greedy_ids "$GOLDEN/mistral/expected.json" tokens)
	for n in 2 4 8; do
		run -0 --separate-stderr sh -c "printf '%s\n' '$prompt' |
			atlas-run generate -m '$GOLDEN/mistral' --device cpu --tp $n -q \
				--temperature 0 --ignore-eos -n $(count_words "$want")"
		expect_eq "$output" "$want" "mistral --tp $n"
	done
}

@test "--tp: bad values exit 2 naming the flag" {
	for v in 0 -1 x 257; do
		run -2 --separate-stderr atlas-run --tp "$v" -p hi
		expect_contains "$stderr" "--tp" "--tp $v"
		expect_empty "$output" "stdout"
	done
}

@test "--tp 3 on a model with 4 heads: exit 1 naming the head count" {
	run -1 --separate-stderr atlas-run --device cpu --tp 3 -p hi
	expect_contains "$stderr" "num_attention_heads (4) to be a multiple of 3"
	expect_empty "$output" "stdout"
}

@test "--tp on CUDA with fewer GPUs than N: exit 1 naming how many there are" {
	run -1 --separate-stderr env LD_LIBRARY_PATH=/nonexistent atlas-run --device cuda \
		--tp 2 -p hi
	expect_contains "$stderr" "--tp 2 needs 2 GPUs, but this machine has 0"
	local d=$BATS_TEST_TMPDIR/fakecuda
	fake_libcuda "$d"
	LD_LIBRARY_PATH=$d run -1 --separate-stderr atlas-run --device cuda --tp 4 -p hi
	expect_contains "$stderr" "--tp 4 needs 4 GPUs, but this machine has 2"
	expect_empty "$output" "stdout"
}
