#!/usr/bin/env bats
# 1140-load-convert-quant.bats - atlas-load convert --quant (issue 19,
# writing quantized checkpoints): each scheme written from a BF16
# checkpoint (qwen3-bf16: hidden 128, MLP 384, so every projection fits
# the 128 group and the 128x128 blocks; k/v have 64 rows, a partial
# block) validates, inspect names the scheme, the quantized tensors have
# the Hub layout's dtypes and shapes, atlas-run generates, and greedy
# tokens follow the source model's for fp8; an already quantized source
# and an unknown scheme are refused.

load test_helper

SRC=$GOLDEN/qwen3-bf16

# greedy ids from MODEL for the golden prompt
greedy_ids() {
	local p
	p=$(tr -d '\n ' <"$SRC/expected.json" | sed 's/.*"prompt":\[\([0-9,]*\)\].*/\1/' | tr ',' ' ')
	echo "$p" | atlas-run generate -m "$1" --device cpu -n 8 --temperature 0 -q 2>/dev/null
}

@test "each scheme converts, validates, names its scheme and generates" {
	local q out
	for q in fp8-block fp8-channel w4a16 nvfp4; do
		out=$BATS_TEST_TMPDIR/$q
		run -0 --separate-stderr atlas-load convert --quant "$q" "$SRC" "$out"
		expect_contains "$stderr" "as $q, the rest BF16"
		run -0 atlas-load validate "$out"
		expect_contains "$output" "valid (0 warnings)"
		run -0 --separate-stderr atlas-run -m "$out" --device cpu -p "The" -n 8 -q --temperature 0
		[ -n "$output" ]
		grep -q '"lm_head"' "$out/config.json"
	done
	run -0 atlas-load inspect "$BATS_TEST_TMPDIR/fp8-block"
	expect_contains "$output" "quantization:    fp8 block 128x128"
	run -0 atlas-load inspect "$BATS_TEST_TMPDIR/fp8-channel"
	expect_contains "$output" "quantization:    compressed-tensors fp8 channel"
	run -0 atlas-load inspect "$BATS_TEST_TMPDIR/w4a16"
	expect_contains "$output" "quantization:    compressed-tensors w4a16 g128"
	run -0 atlas-load inspect "$BATS_TEST_TMPDIR/nvfp4"
	expect_contains "$output" "quantization:    compressed-tensors nvfp4"
}

@test "the quantized tensors have the layouts' dtypes and shapes" {
	local d=$BATS_TEST_TMPDIR
	atlas-load convert --quant fp8-block "$SRC" "$d/fb" >/dev/null 2>&1
	run -0 atlas-load inspect --tensors "$d/fb"
	expect_contains "$output" "model.layers.0.mlp.down_proj.weight	F8_E4M3	[128, 384]"
	expect_contains "$output" "model.layers.0.mlp.down_proj.weight_scale_inv	BF16	[1, 3]"
	expect_contains "$output" "model.layers.0.self_attn.k_proj.weight_scale_inv	BF16	[1, 1]"
	expect_contains "$output" "model.embed_tokens.weight	BF16	[1024, 128]"
	expect_contains "$output" "lm_head.weight	BF16	[1024, 128]"
	expect_contains "$output" "model.norm.weight	BF16	[128]"
	atlas-load convert --quant fp8-channel "$SRC" "$d/fc" >/dev/null 2>&1
	run -0 atlas-load inspect --tensors "$d/fc"
	expect_contains "$output" "model.layers.1.mlp.gate_proj.weight	F8_E4M3	[384, 128]"
	expect_contains "$output" "model.layers.1.mlp.gate_proj.weight_scale	BF16	[384, 1]"
	atlas-load convert --quant w4a16 "$SRC" "$d/w4" >/dev/null 2>&1
	run -0 atlas-load inspect --tensors "$d/w4"
	expect_contains "$output" "model.layers.0.mlp.down_proj.weight_packed	I32	[128, 48]"
	expect_contains "$output" "model.layers.0.mlp.down_proj.weight_scale	BF16	[128, 3]"
	expect_contains "$output" "model.layers.0.mlp.down_proj.weight_shape	I64	[2]"
	[[ $output != *"down_proj.weight	"* ]]
	atlas-load convert --quant nvfp4 "$SRC" "$d/nv" >/dev/null 2>&1
	run -0 atlas-load inspect --tensors "$d/nv"
	expect_contains "$output" "model.layers.3.self_attn.q_proj.weight_packed	U8	[128, 64]"
	expect_contains "$output" "model.layers.3.self_attn.q_proj.weight_scale	F8_E4M3	[128, 8]"
	expect_contains "$output" "model.layers.3.self_attn.q_proj.weight_global_scale	F32	[1]"
	grep -q '"format": "nvfp4-pack-quantized"' "$d/nv/config.json"
	grep -q '"strategy": "tensor_group"' "$d/nv/config.json"
}

@test "fp8 follows the source model's greedy tokens" {
	local want
	want=$(greedy_ids "$SRC")
	[ -n "$want" ]
	atlas-load convert --quant fp8-block "$SRC" "$BATS_TEST_TMPDIR/fb" >/dev/null 2>&1
	run -0 greedy_ids "$BATS_TEST_TMPDIR/fb"
	[ "$output" = "$want" ]
	# channel scales are coarser: this random model's margins are small
	# (0.12), the first two tokens still agree
	atlas-load convert --quant fp8-channel "$SRC" "$BATS_TEST_TMPDIR/fc" >/dev/null 2>&1
	run -0 greedy_ids "$BATS_TEST_TMPDIR/fc"
	[ "$(echo "$output" | cut -d' ' -f1-2)" = "$(echo "$want" | cut -d' ' -f1-2)" ]
}

@test "--dtype applies to the tensors left unquantized; sharding and the index work" {
	local out=$BATS_TEST_TMPDIR/f32
	run -0 --separate-stderr atlas-load convert --quant w4a16 --dtype f32 --max-shard-size 300KB "$SRC" "$out"
	expect_contains "$stderr" "the rest F32 in"
	[ -f "$out/model.safetensors.index.json" ]
	grep -q '"model.layers.0.mlp.down_proj.weight_packed"' "$out/model.safetensors.index.json"
	run -0 atlas-load inspect --tensors "$out"
	expect_contains "$output" "model.embed_tokens.weight	F32	[1024, 128]"
	expect_contains "$output" "model.layers.0.mlp.down_proj.weight_scale	BF16	[128, 3]"
	grep -q '"float32"' "$out/config.json"
	run -0 atlas-load validate "$out"
	ls "$BATS_TEST_TMPDIR" | { ! grep -q partial; }
}

@test "an already quantized checkpoint and an unknown scheme are refused" {
	run -1 --separate-stderr atlas-load convert --quant fp8-block "$GOLDEN/quant-ct-w4a16" "$BATS_TEST_TMPDIR/o"
	expect_contains "$stderr" "is already quantized (compressed-tensors w4a16 g16 asym)"
	[ ! -e "$BATS_TEST_TMPDIR/o" ]
	ls "$BATS_TEST_TMPDIR" | { ! grep -q partial; }
	# a plain dtype conversion would round its scales: refused too
	run -1 --separate-stderr atlas-load convert --dtype f32 "$GOLDEN/quant-nvfp4" "$BATS_TEST_TMPDIR/o"
	expect_contains "$stderr" "is quantized (modelopt nvfp4); convert --dtype rewrites BF16, F16 or F32 checkpoints"
	[ ! -e "$BATS_TEST_TMPDIR/o" ]
	run -2 --separate-stderr atlas-load convert --quant int3 "$SRC" "$BATS_TEST_TMPDIR/o"
	expect_contains "$stderr" "--quant: 'int3' is not one of fp8-block, fp8-channel, w4a16, nvfp4"
	run -2 --separate-stderr atlas-load inspect --quant w4a16 "$SRC"
	expect_contains "$stderr" "--quant applies to convert only"
}

@test "on a terminal convert draws a progress line up to 100%; piped, it does not" {
	command -v script >/dev/null || skip "no script(1) to give convert a terminal"
	run -0 script -qec "atlas-load convert --quant fp8-block '$SRC' '$BATS_TEST_TMPDIR/t'" /dev/null
	expect_contains "$output" "atlas-load: writing 100% ("
	run -0 --separate-stderr atlas-load convert --quant fp8-block "$SRC" "$BATS_TEST_TMPDIR/p"
	[[ "$stderr" != *"writing"* ]]
}
