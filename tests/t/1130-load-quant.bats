#!/usr/bin/env bats
# 1130-load-quant.bats - quantized checkpoints as the Hub stores them
# (issue 19): every format's golden fixture validates, inspect names the
# scheme, atlas-run generates from them, and what Atlas does not
# dequantize (an unknown method, bits it does not take, scales that do
# not match the config) is refused at load with the name of the method
# or the tensor.

load test_helper

FORMATS="quant-fp8 quant-ct-fp8 quant-awq quant-gptq quant-gptq-g32 quant-ct-w4a16 quant-nvfp4 quant-ct-nvfp4"

@test "every quantized fixture validates" {
	for f in $FORMATS; do
		run -0 atlas-load validate "$GOLDEN/$f"
		expect_contains "$output" "valid (0 warnings)"
	done
}

@test "inspect names the scheme; a dense BF16 model has none" {
	run -0 atlas-load inspect "$GOLDEN/quant-fp8"
	expect_contains "$output" "quantization:    fp8 block 32x32 (linear layers FP8 on GPUs, dequantized on the CPU)"
	run -0 atlas-load inspect "$GOLDEN/quant-awq"
	expect_contains "$output" "quantization:    awq w4 g16"
	run -0 atlas-load inspect "$GOLDEN/quant-gptq"
	expect_contains "$output" "quantization:    gptq w4 g16 act-order"
	expect_contains "$output" "act-order (dequantized to the activation type at load)"
	run -0 atlas-load inspect "$GOLDEN/quant-gptq-g32"
	expect_contains "$output" "quantization:    gptq w4 g32 (linear layers 4-bit on GPUs, dequantized on the CPU)"
	run -0 atlas-load inspect "$GOLDEN/quant-ct-w4a16"
	expect_contains "$output" "quantization:    compressed-tensors w4a16 g16 asym (dequantized"
	run -0 atlas-load inspect "$GOLDEN/quant-ct-nvfp4"
	expect_contains "$output" "quantization:    compressed-tensors nvfp4"
	run -0 --separate-stderr atlas-load inspect --json "$GOLDEN/quant-nvfp4"
	expect_contains "$output" '"quantization":"modelopt nvfp4"'
	run -0 --separate-stderr atlas-load inspect --json "$GOLDEN/qwen3"
	expect_contains "$output" '"quantization":null'
}

@test "atlas-run generates from the formats (test-golden checks the tokens)" {
	for f in quant-fp8 quant-gptq quant-nvfp4; do
		run -0 --separate-stderr atlas-run -m "$GOLDEN/$f" --device cpu -p "The" -n 6 -q --temperature 0
		[ -n "$output" ]
	done
	run -0 --separate-stderr atlas-run -m "$GOLDEN/quant-awq" --device cpu -p "The" -n 4 -v
	expect_contains "$stderr" "quantized checkpoint (awq w4 g16)"
}

@test "an unknown quantization method is refused by name" {
	local m
	m=$(model_copy "$GOLDEN/quant-fp8" m)
	sed -i 's/"quant_method": "fp8"/"quant_method": "bitsandbytes"/' "$m/config.json"
	run -1 atlas-run -m "$m" --device cpu -p hi -n 2
	expect_contains "$output" "quantization method 'bitsandbytes' is not supported"
	run -1 atlas-load validate "$m"
	expect_contains "$output" "bitsandbytes"
}

@test "GPTQ with 3 bits and AWQ in the gemv layout are refused" {
	local m
	m=$(model_copy "$GOLDEN/quant-gptq" m)
	sed -i 's/"bits": 4/"bits": 3/' "$m/config.json"
	run -1 atlas-run -m "$m" --device cpu -p hi -n 2
	expect_contains "$output" "GPTQ with 3 bits is not supported"
	m=$(model_copy "$GOLDEN/quant-awq" a)
	sed -i 's/"version": "gemm"/"version": "gemv"/' "$m/config.json"
	run -1 atlas-run -m "$m" --device cpu -p hi -n 2
	expect_contains "$output" "AWQ version 'gemv' is not supported"
}

@test "scales that do not match the config are refused with the tensor's name" {
	local m
	m=$(model_copy "$GOLDEN/quant-fp8" m)
	sed -i '/"weight_block_size"/,/\]/c\  "weight_block_size": [64, 64],' "$m/config.json"
	run -1 atlas-run -m "$m" --device cpu -p hi -n 2
	expect_contains "$output" "weight_scale_inv"
	expect_contains "$output" "model.layers.0.self_attn.q_proj"
	run -1 atlas-load validate "$m"
	expect_contains "$output" "weight_scale_inv"
	m=$(model_copy "$GOLDEN/quant-awq" g)
	sed -i 's/"group_size": 16/"group_size": 32/' "$m/config.json"
	run -1 atlas-run -m "$m" --device cpu -p hi -n 2
	expect_contains "$output" "model.layers.0.self_attn.q_proj"
}

@test "quantized MoE and QKV-bias models load: the router and biases follow the experts' and matrices' dequantized dtype" {
	# convert --quant fp8-block of the MoE and Qwen2 goldens: the experts
	# and projections are F8, the router and the q/k/v biases stay BF16
	local src out
	for src in qwen3-moe qwen2-moe qwen2; do
		out="$BATS_TEST_TMPDIR/$src-fp8"
		run -0 atlas-load convert --quant fp8-block "$GOLDEN/$src" "$out"
		run -0 atlas-load validate "$out"
		run -0 --separate-stderr atlas-run -m "$out" --device cpu -p "The" -n 8 -q --temperature 0
		local quantized=$output
		run -0 --separate-stderr atlas-run -m "$GOLDEN/$src" --device cpu -p "The" -n 8 -q --temperature 0
		# these tiny models' first 8 greedy tokens survive FP8 weights
		expect_eq "$quantized" "$output"
	done
}

@test "an ignore list with a bad regular expression is refused at load, by name" {
	local m
	m=$(model_copy "$GOLDEN/quant-awq" m)
	sed -i 's/"modules_to_not_convert": null/"modules_to_not_convert": ["re:(("]/' "$m/config.json"
	run -1 atlas-run -m "$m" --device cpu -p hi -n 2
	expect_contains "$output" "'modules_to_not_convert' holds a bad regular expression '(('"
}
