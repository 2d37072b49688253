#!/usr/bin/env bats
# 1125-load-hybrid.bats - the hybrid Gated-DeltaNet + attention MoE
# checkpoints of tests/fixtures/hybrid (qwen3_next, qwen3_5_moe's text
# model, as transformers 5.17 writes them) are refused by name, with the
# supported families listed, by atlas-load validate and atlas-run: no
# crash, exit 1. When the families land these fixtures become goldens
# (lib/model/README-hybrid.md) and this file goes.

load test_helper

HY=$ATLAS_SRC/tests/fixtures/hybrid

@test "qwen3_next and qwen3_5_moe_text: refused by name at load, exit 1" {
	local m arch type
	for m in qwen3-next-bf16:Qwen3NextForCausalLM:qwen3_next \
		qwen3-5-moe:Qwen3_5MoeForCausalLM:qwen3_5_moe_text; do
		IFS=: read -r m arch type <<<"$m"
		[ -f "$HY/$m/expected.json" ] || { echo "missing fixture $m" >&2; false; }
		run -1 --separate-stderr atlas-run --device cpu -m "$HY/$m" -p hi -n 1
		expect_empty "$output" "stdout of $m"
		expect_contains "$stderr" "unsupported architecture '$arch' (model_type '$type')" "$m"
		expect_contains "$stderr" "supported: " "$m"
		run -1 atlas-load validate "$HY/$m"
		expect_contains "$output" "unsupported architecture" "validate $m"
	done
}
