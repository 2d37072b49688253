#!/usr/bin/env bats
# 1100-load-inspect.bats - atlas-load's command line, inspect (text and
# --json, --tensors) and validate (golden models pass; broken copies give
# a precise list of problems and exit 1).

load test_helper

@test "--help lists the commands and flags; -h is the same; --version" {
	run -0 --separate-stderr atlas-load --help
	expect_match "${lines[0]}" '^usage: atlas-load inspect ' "first line"
	for f in inspect validate convert --tensors --json --dtype --max-shard-size --help --version; do
		expect_contains "$output" "$f" "usage"
	done
	local long=$output
	run -0 atlas-load -h
	expect_eq "$output" "$long" "-h output"
	run -0 atlas-load --version
	expect_match "$output" "^atlas-load $(cat "$ATLAS_SRC/VERSION")( |\$)" "version"
}

@test "usage errors exit 2 with a hint" {
	run -2 --separate-stderr atlas-load
	expect_contains "$stderr" "no command given"
	expect_contains "$stderr" "atlas-load --help"
	run -2 --separate-stderr atlas-load frobnicate "$GOLDEN/qwen3"
	expect_contains "$stderr" "'frobnicate'"
	run -2 --separate-stderr atlas-load inspect
	expect_contains "$stderr" "MODEL"
	run -2 --separate-stderr atlas-load inspect "$GOLDEN/qwen3" extra
	expect_contains "$stderr" "'extra'"
	run -2 --separate-stderr atlas-load convert "$GOLDEN/qwen3" "$BATS_TEST_TMPDIR/o"
	expect_contains "$stderr" "--dtype is required"
	run -2 --separate-stderr atlas-load convert --dtype int3 "$GOLDEN/qwen3" "$BATS_TEST_TMPDIR/o"
	expect_contains "$stderr" "'int3'"
	run -2 --separate-stderr atlas-load convert --dtype bf16 --max-shard-size 5XB "$GOLDEN/qwen3" "$BATS_TEST_TMPDIR/o"
	expect_contains "$stderr" "--max-shard-size"
	run -2 --separate-stderr atlas-load convert --dtype bf16 "$GOLDEN/qwen3"
	expect_contains "$stderr" "OUT"
	run -2 --separate-stderr atlas-load validate --tensors "$GOLDEN/qwen3"
	expect_contains "$stderr" "--tensors"
	run -2 --separate-stderr atlas-load --bogus inspect "$GOLDEN/qwen3"
	expect_contains "$stderr" "--bogus"
}

@test "a missing model: exit 1 naming it" {
	run -1 --separate-stderr atlas-load inspect /nonexistent/model
	expect_empty "$output" "stdout"
	expect_contains "$stderr" "'/nonexistent/model'"
	run -1 --separate-stderr atlas-load validate /nonexistent/model
	expect_contains "$stderr" "'/nonexistent/model'"
}

@test "inspect: the summary of a golden model" {
	run -0 --separate-stderr atlas-load inspect "$GOLDEN/qwen3"
	expect_match "$output" "^architecture: +Qwen3ForCausalLM \(model_type qwen3\)" "architecture"
	expect_match "$output" "^family: +qwen3$" "family"
	expect_match "$output" "^parameters: +[0-9.]+ K \(180672\)$" "parameters"
	expect_match "$output" "^dtypes: +F32 100.0%$" "dtypes"
	expect_match "$output" "^bytes: .*\(722688\)$" "bytes"
	expect_match "$output" "^tensors: +24 in 1 file$" "tensors"
	expect_match "$output" "^context length: +512$" "context"
	expect_match "$output" "^tokenizer: +BPE$" "tokenizer"
	expect_match "$output" "^chat template: +(yes|no)$" "chat template"
	expect_match "$output" "^kernel targets: +(none \(CPU-only build\)|.*sm[0-9]+/(common|qwen3)/.*|none for this family)$" "kernel targets"
	run -0 atlas-load inspect "$GOLDEN/qwen3-bf16"
	expect_match "$output" "^dtypes: +BF16 100.0%$" "bf16 dtypes"
}

@test "inspect --tensors lists every tensor with dtype, shape and bytes" {
	run -0 --separate-stderr atlas-load inspect --tensors "$GOLDEN/qwen3"
	expect_contains "$output" "$(printf 'model.embed_tokens.weight\tF32\t[1088, 64]\t278528')"
	expect_contains "$output" "$(printf 'model.layers.1.self_attn.k_norm.weight\tF32\t[32]\t128')"
	expect_eq "$(printf '%s\n' "$output" | grep -c "$(printf '\t')")" 24 "tensor lines"
}

@test "inspect --json: one object with the same facts" {
	run -0 --separate-stderr atlas-load inspect --json "$GOLDEN/llama3"
	expect_eq "${#lines[@]}" 1 "lines"
	expect_eq "$(json_field "$output" family)" '"llama"' "family"
	expect_eq "$(json_field "$output" parameters)" "$(atlas-load inspect "$GOLDEN/llama3" | sed -n 's/^parameters: .*(\([0-9]*\))$/\1/p')" "parameters"
	expect_eq "$(json_field "$output" context_length)" "$(grep '"max_position_embeddings"' "$GOLDEN/llama3/config.json" | tr -dc 0-9)" "context"
	expect_contains "$output" '"dtypes":{"F32":'
	expect_contains "$output" '"kernel_targets":['
	run -0 atlas-load inspect --json --tensors "$GOLDEN/llama3"
	expect_contains "$output" '"tensor_list":[{"name":"'
}

@test "inspect of a Hub id in the cache" {
	local c=$BATS_TEST_TMPDIR/hub-cache repo
	repo=$c/models--org--m
	mkdir -p "$repo/refs" "$repo/snapshots/0123456789abcdef0123456789abcdef01234567"
	cp "$GOLDEN/qwen2/"* "$repo/snapshots/0123456789abcdef0123456789abcdef01234567/"
	printf 0123456789abcdef0123456789abcdef01234567 >"$repo/refs/main"
	HF_HUB_CACHE=$c run -0 atlas-load inspect org/m
	expect_match "$output" "^family: +qwen2$" "family"
}

@test "validate: every golden model is valid" {
	local m
	for m in llama3 llama-tied mistral qwen2 qwen3 qwen3-bf16; do
		run -0 --separate-stderr atlas-load validate "$GOLDEN/$m"
		expect_match "$output" "valid \(0 warnings\)$" "$m"
	done
	run -0 atlas-load validate --json "$GOLDEN/qwen3"
	expect_contains "$output" '"valid":true,"problems":[],"warnings":[]'
}

@test "validate: a model with a wrong shape and a missing tensor lists both, exit 1" {
	local m
	m=$(model_copy "$GOLDEN/qwen3" broken)
	sed -i 's/"intermediate_size": 160/"intermediate_size": 128/' "$m/config.json"
	run -1 --separate-stderr atlas-load validate "$m"
	expect_contains "$output" "problem: tensor 'model.layers.0.mlp.gate_proj.weight' in '$m/model.safetensors' has shape [160, 64], but config.json implies [128, 64]"
	expect_contains "$output" "problem: tensor 'model.layers.1.mlp.down_proj.weight'"
	expect_match "$output" "^$m: 6 problems, 0 warnings$" "summary"
	expect_contains "$stderr" "not a valid checkpoint"
	# one more layer than the file holds: every tensor of layer 2 is missing
	# (layer_types, which transformers 5 writes one entry a layer, grows too)
	m=$(model_copy "$GOLDEN/qwen3" deeper)
	sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$m/config.json"
	sed -i 's/"layer_types": \[/"layer_types": ["full_attention", /' "$m/config.json"
	run -1 atlas-load validate --json "$m"
	expect_contains "$output" '"valid":false'
	expect_contains "$output" "tensor 'model.layers.2.self_attn.q_proj.weight' is missing"
	expect_contains "$output" "tensor 'model.layers.2.mlp.up_proj.weight' is missing"
}

@test "validate: tensors nobody reads are warnings, not problems" {
	local m
	m=$(model_copy "$GOLDEN/qwen3" fewer)
	sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 1/' "$m/config.json"
	# (layer_types keeps one entry; the other moves to a key nobody reads)
	sed -i 's/"layer_types": \[/"layer_types": [ "full_attention" ], "unused": [/' "$m/config.json"
	run -0 --separate-stderr atlas-load validate "$m"
	expect_contains "$output" "warning: unexpected tensor 'model.layers.1.mlp.up_proj.weight'"
	expect_match "$output" "valid \(11 warnings\)$" "summary"
}

@test "validate: an unknown architecture, a truncated file, a bad index" {
	local m
	m=$(model_copy "$GOLDEN/qwen3" arch)
	sed -i 's/"model_type": "qwen3"/"model_type": "gpt5"/; s/Qwen3ForCausalLM/Gpt5ForCausalLM/' "$m/config.json"
	run -1 atlas-load validate "$m"
	expect_contains "$output" "unsupported architecture"
	m=$(model_copy "$GOLDEN/qwen3" trunc)
	truncate -s 5000 "$m/model.safetensors"
	run -1 atlas-load validate "$m"
	expect_contains "$output" "model.safetensors"
	m=$(model_copy "$GOLDEN/qwen3" index)
	mv "$m/model.safetensors" "$m/model-00001-of-00001.safetensors"
	printf '{"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00002-of-00002.safetensors"}}\n' \
		>"$m/model.safetensors.index.json"
	run -1 atlas-load validate "$m"
	expect_contains "$output" "model-00002-of-00002.safetensors"
}
