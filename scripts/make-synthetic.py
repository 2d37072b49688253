#!/usr/bin/env python3
"""make-synthetic.py - write a random-weight BF16 checkpoint at a real
model's shape, for speed measurements (speed does not depend on values).

    python3 scripts/make-synthetic.py SHAPE OUTDIR

SHAPE is one of the names below (the mixtures of experts get their own
model_type and per-expert tensors). Pure Python, no numpy: one block of
random BF16 values (normal, std 0.02) is drawn and repeated through every
tensor. The shipped default model's tokenizer is copied in so atlas-run
can take text prompts (its ids are far below any real vocabulary size).
"""
import json
import os
import random
import shutil
import struct
import sys

SHAPES = {
    # name: (hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, tied)
    "qwen3-0.6b": (1024, 28, 16, 8, 128, 3072, 151936, True),
    "qwen3-1.7b": (2048, 28, 16, 8, 128, 6144, 151936, True),
    "qwen3-8b": (4096, 36, 32, 8, 128, 12288, 151936, False),
    "llama3-8b": (4096, 32, 32, 8, 128, 14336, 128256, False),
    # mixtures of experts (every layer sparse; experts as the Hub ships them)
    "qwen3-30b-a3b": (2048, 48, 32, 4, 128, 6144, 151936, False),
    "mixtral-8x7b": (4096, 32, 32, 8, 128, 14336, 32000, False),
}

MOE = {
    # name: (model_type, experts, top_k, expert width, norm_topk_prob)
    "qwen3-30b-a3b": ("qwen3_moe", 128, 8, 768, True),
    "mixtral-8x7b": ("mixtral", 8, 2, 14336, False),
}


def bf16_block(n, seed=0):
    rng = random.Random(seed)
    out = bytearray()
    for _ in range(n):
        f = struct.pack("<f", rng.gauss(0.0, 0.02))
        out += f[2:4]  # upper half of a little-endian float32 = bf16 (truncated)
    return bytes(out)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        sys.exit("usage: make-synthetic.py {%s} OUTDIR" % ",".join(SHAPES))
    name, out = sys.argv[1], sys.argv[2]
    D, L, H, KV, hd, F, V, tied = SHAPES[name]
    mtype, E, K, FE, norm = MOE.get(name, ("qwen3", 0, 0, 0, False))
    tensors = [("model.embed_tokens.weight", [V, D]), ("model.norm.weight", [D])]
    if not tied:
        tensors.append(("lm_head.weight", [V, D]))
    for l in range(L):
        p = f"model.layers.{l}."
        tensors += [
            (p + "input_layernorm.weight", [D]), (p + "post_attention_layernorm.weight", [D]),
            (p + "self_attn.q_proj.weight", [H * hd, D]), (p + "self_attn.k_proj.weight", [KV * hd, D]),
            (p + "self_attn.v_proj.weight", [KV * hd, D]), (p + "self_attn.o_proj.weight", [D, H * hd]),
        ]
        if mtype != "mixtral":  # Qwen3's q/k norms
            tensors += [(p + "self_attn.q_norm.weight", [hd]), (p + "self_attn.k_norm.weight", [hd])]
        if not E:
            tensors += [
                (p + "mlp.gate_proj.weight", [F, D]), (p + "mlp.up_proj.weight", [F, D]),
                (p + "mlp.down_proj.weight", [D, F]),
            ]
            continue
        blk, proj = ("block_sparse_moe", ("w1", "w3", "w2")) if mtype == "mixtral" else \
            ("mlp", ("gate_proj", "up_proj", "down_proj"))
        tensors.append((p + blk + ".gate.weight", [E, D]))
        for e in range(E):
            q = f"{p}{blk}.experts.{e}."
            tensors += [(q + proj[0] + ".weight", [FE, D]), (q + proj[1] + ".weight", [FE, D]),
                        (q + proj[2] + ".weight", [D, FE])]
    header, off = {}, 0
    for n, shape in tensors:
        size = 2
        for d in shape:
            size *= d
        header[n] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + size]}
        off += size
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    os.makedirs(out, exist_ok=True)
    block = bf16_block(1 << 20)
    ones = struct.pack("<H", 0x3F80) * (1 << 16)  # norm weights: 1.0
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for n, shape in tensors:
            size = header[n]["data_offsets"][1] - header[n]["data_offsets"][0]
            src = ones if n.endswith("norm.weight") else block
            while size > 0:
                k = min(size, len(src))
                f.write(src[:k])
                size -= k
    arch = {"qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
            "mixtral": "MixtralForCausalLM"}[mtype]
    cfg = {
        "architectures": [arch], "model_type": mtype, "hidden_size": D,
        "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
        "head_dim": hd, "intermediate_size": F, "vocab_size": V, "tie_word_embeddings": tied,
        "max_position_embeddings": 40960, "rms_norm_eps": 1e-5 if mtype == "mixtral" else 1e-6,
        "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "dtype": "bfloat16", "bos_token_id": None, "eos_token_id": 1021,
    }
    if mtype == "qwen3_moe":
        cfg.update({"num_experts": E, "num_experts_per_tok": K, "moe_intermediate_size": FE,
                    "norm_topk_prob": norm, "decoder_sparse_step": 1, "mlp_only_layers": []})
    elif mtype == "mixtral":
        cfg.update({"num_local_experts": E, "num_experts_per_tok": K, "sliding_window": None})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    here = os.path.dirname(os.path.abspath(__file__))
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(here, "..", "models", "default", fn), out)
    print(f"{name}: {off / 1e9:.2f} GB of BF16 weights in {out}")


if __name__ == "__main__":
    main()
