#!/usr/bin/env bats
# 1120-load-inspect-moe.bats - atlas-load inspect on mixture-of-experts
# checkpoints: the expert count, top k, expert width, the shared expert's
# width when there is one and the layers left dense, in text and --json;
# a dense model shows none of it.

load test_helper

# moe_lines MODEL - inspect's MoE lines of MODEL.
moe_lines() {
	atlas-load inspect "$1" | grep -E '^(experts|shared expert|dense layers):'
}

@test "qwen3-moe: experts, top k, width, mlp_only_layers dense" {
	run -0 moe_lines "$GOLDEN/qwen3-moe"
	expect_eq "$output" "experts:         8 per sparse layer, top 2, expert width 32
dense layers:    1"
}

@test "qwen2-moe: the shared expert, every layer sparse" {
	run -0 moe_lines "$GOLDEN/qwen2-moe"
	expect_eq "$output" "experts:         8 per sparse layer, top 2, expert width 32
shared expert:   width 48
dense layers:    none"
}

@test "decoder_sparse_step and mlp_only_layers together: dense layers as ranges" {
	local m
	m=$(model_copy "$GOLDEN/qwen3-moe" m)
	# 7 layers, step 2: layers 0, 2, 4, 6 dense by the step, 3 by the list
	sed -i 's/"num_hidden_layers": 3/"num_hidden_layers": 7/; s/"decoder_sparse_step": 1/"decoder_sparse_step": 2/' "$m/config.json"
	sed -i '/"mlp_only_layers"/,/\]/c\  "mlp_only_layers": [3],' "$m/config.json"
	run -0 moe_lines "$m"
	expect_eq "$output" "experts:         8 per sparse layer, top 2, expert width 32
dense layers:    0, 2-4, 6"
}

@test "--json: the moe object; null for a dense model" {
	run -0 --separate-stderr atlas-load inspect --json "$GOLDEN/qwen3-moe"
	expect_contains "$output" '"moe":{"experts":8,"top_k":2,"expert_width":32,"shared_expert_width":null,"norm_topk_prob":true,"dense_layers":[1]}'
	run -0 --separate-stderr atlas-load inspect --json "$GOLDEN/qwen2-moe"
	expect_contains "$output" '"moe":{"experts":8,"top_k":2,"expert_width":32,"shared_expert_width":48,"norm_topk_prob":false,"dense_layers":[]}'
	run -0 --separate-stderr atlas-load inspect --json "$GOLDEN/qwen3"
	expect_contains "$output" '"moe":null'
	run -0 atlas-load inspect "$GOLDEN/qwen3"
	[[ "$output" != *"experts:"* ]]
}
