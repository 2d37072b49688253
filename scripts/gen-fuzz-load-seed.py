#!/usr/bin/env python3
"""gen-fuzz-load-seed.py OUT - the seed of tests/fuzz/fuzz-load.c: a valid
checkpoint (BF16, random weights, fixed seed) of a tiny Qwen3-Next with
an MTP head, written to OUT; its config.json, which fuzz-load.c embeds,
goes to stdout. Standard library only.
"""
import json, struct, random, sys
sys.path.insert(0, 'scripts')
rng = random.Random(5)
D, V, H, Hkv, hd = 16, 32, 2, 1, 8
Hk, Hv, dk, dv, K = 1, 2, 8, 8, 4
E, Fe, Fs, F = 2, 8, 8, 16
C = 2 * Hk * dk + Hv * dv
T = {}
def add(name, shape):
    n = 1
    for s in shape: n *= s
    T[name] = shape
def attn(p):
    add(p + "self_attn.q_proj.weight", [2 * H * hd, D]); add(p + "self_attn.k_proj.weight", [Hkv * hd, D])
    add(p + "self_attn.v_proj.weight", [Hkv * hd, D]); add(p + "self_attn.o_proj.weight", [D, H * hd])
    add(p + "self_attn.q_norm.weight", [hd]); add(p + "self_attn.k_norm.weight", [hd])
def moe(p):
    add(p + "mlp.gate.weight", [E, D])
    for e in range(E):
        add(p + "mlp.experts.%d.gate_proj.weight" % e, [Fe, D]); add(p + "mlp.experts.%d.up_proj.weight" % e, [Fe, D])
        add(p + "mlp.experts.%d.down_proj.weight" % e, [D, Fe])
    add(p + "mlp.shared_expert.gate_proj.weight", [Fs, D]); add(p + "mlp.shared_expert.up_proj.weight", [Fs, D])
    add(p + "mlp.shared_expert.down_proj.weight", [D, Fs]); add(p + "mlp.shared_expert_gate.weight", [1, D])
add("model.embed_tokens.weight", [V, D]); add("model.norm.weight", [D]); add("lm_head.weight", [V, D])
for l in range(2):
    p = "model.layers.%d." % l
    add(p + "input_layernorm.weight", [D]); add(p + "post_attention_layernorm.weight", [D])
    if l == 0:
        q = p + "linear_attn."
        add(q + "A_log", [Hv]); add(q + "dt_bias", [Hv]); add(q + "conv1d.weight", [C, 1, K])
        add(q + "in_proj_qkvz.weight", [C + Hv * dv, D]); add(q + "in_proj_ba.weight", [2 * Hv, D])
        add(q + "norm.weight", [dv]); add(q + "out_proj.weight", [D, Hv * dv])
    else:
        attn(p)
    moe(p)
add("mtp.fc.weight", [D, 2 * D]); add("mtp.pre_fc_norm_embedding.weight", [D])
add("mtp.pre_fc_norm_hidden.weight", [D]); add("mtp.norm.weight", [D])
p = "mtp.layers.0."
add(p + "input_layernorm.weight", [D]); add(p + "post_attention_layernorm.weight", [D]); attn(p); moe(p)
def bf16(v):
    u = struct.unpack("<I", struct.pack("<f", v))[0]
    u += 0x7FFF + ((u >> 16) & 1)
    return struct.pack("<H", (u >> 16) & 0xFFFF)
head, off, blobs = {}, 0, []
for name, shape in T.items():
    n = 1
    for s in shape: n *= s
    raw = b"".join(bf16(rng.gauss(0, 0.2)) for _ in range(n))
    head[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(raw)]}
    blobs.append(raw); off += len(raw)
h = json.dumps(head, separators=(",", ":")).encode(); h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
cfg = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "vocab_size": V,
       "hidden_size": D, "intermediate_size": F, "num_hidden_layers": 2, "num_attention_heads": H,
       "num_key_value_heads": Hkv, "head_dim": hd, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
       "rope_theta": 10000.0, "partial_rotary_factor": 0.5, "hidden_act": "silu",
       "layer_types": ["linear_attention", "full_attention"], "linear_num_key_heads": Hk,
       "linear_num_value_heads": Hv, "linear_key_head_dim": dk, "linear_value_head_dim": dv,
       "linear_conv_kernel_dim": K, "num_experts": E, "num_experts_per_tok": 1,
       "moe_intermediate_size": Fe, "shared_expert_intermediate_size": Fs, "norm_topk_prob": True,
       "decoder_sparse_step": 1, "mlp_only_layers": [], "num_nextn_predict_layers": 1,
       "tie_word_embeddings": False, "eos_token_id": 1, "dtype": "bfloat16"}
print(json.dumps(cfg, separators=(",", ":")))
