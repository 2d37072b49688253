#!/usr/bin/env bats
# 1125-load-hybrid.bats - atlas-load on the hybrid Gated-DeltaNet +
# attention MoE checkpoints of tests/fixtures/golden (qwen3_next, and
# qwen3_5_moe's text model, as transformers 5.17 writes them): validate
# accepts them in both projection layouts, inspect names the linear-
# attention layers (text and JSON), and a broken hybrid config or tensor
# is refused by name.

load test_helper

G=$ATLAS_SRC/tests/fixtures/golden

@test "validate: both hybrid layouts are valid checkpoints" {
	local m
	for m in qwen3-next-bf16 qwen3-5-moe; do
		run -0 atlas-load validate "$G/$m"
		expect_contains "$output" "valid (0 warnings)" "$m"
	done
}

@test "inspect: the linear-attention layers, their heads and the conv width" {
	run -0 atlas-load inspect "$G/qwen3-next-bf16"
	expect_contains "$output" "family:          qwen3_next" "family"
	expect_contains "$output" "linear attn:     0-2 (Gated DeltaNet, 2/4 heads of 16/16, conv 4)" "text"
	expect_contains "$output" "dense layers:    1" "dense"
	run -0 atlas-load inspect --json "$G/qwen3-5-moe"
	expect_contains "$output" '"family":"qwen3_5_moe_text"' "json family"
	expect_contains "$output" '"linear_attention":{"layers":[0,1,2],"key_heads":2,"value_heads":4,"key_head_dim":16,"value_head_dim":16,"conv_width":4}' "json"
	run -0 atlas-load inspect --json "$ATLAS_SRC/models/default"
	expect_contains "$output" '"linear_attention":null' "a dense model"
}

@test "a misshapen DeltaNet tensor or layer type is refused by name" {
	local d
	d=$(model_copy "$G/qwen3-next-bf16" bad)
	sed -i 's/"linear_num_value_heads": 4/"linear_num_value_heads": 3/' "$d/config.json"
	run -1 atlas-load validate "$d"
	expect_contains "$output" "linear_num_value_heads (3) is not a multiple of linear_num_key_heads (2)" "heads"
	d=$(model_copy "$G/qwen3-next-bf16" bad2)
	sed -i 's/"linear_conv_kernel_dim": 4/"linear_conv_kernel_dim": 3/' "$d/config.json"
	run -1 atlas-load validate "$d"
	expect_contains "$output" "linear_attn.conv1d.weight' in '$d/model.safetensors' has shape [128, 1, 4], but config.json implies [128, 1, 3]" "conv"
	run -1 --separate-stderr atlas-run --device cpu -m "$d" -p hi -n 1
	expect_contains "$stderr" "conv1d.weight" "run"
	d=$(model_copy "$G/qwen3-5-moe" bad3)
	sed -i '0,/"linear_attention"/s//"sliding_attention"/' "$d/config.json"
	run -1 atlas-load validate "$d"
	expect_contains "$output" "layer_types[0] 'sliding_attention' is not supported (supported: full_attention, linear_attention)" "type"
}
