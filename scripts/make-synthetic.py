#!/usr/bin/env python3
"""make-synthetic.py - write a random-weight BF16 checkpoint at a real
model's shape, for speed measurements (speed does not depend on values).

    python3 scripts/make-synthetic.py [--quant fp8-block|w4a16] SHAPE OUTDIR

SHAPE is one of the names below (the mixtures of experts get their own
model_type and per-expert tensors). Pure Python, no numpy: one block of
random BF16 values (normal, std 0.02) is drawn and repeated through every
tensor. The shipped default model's tokenizer is copied in so atlas-run
can take text prompts (its ids are far below any real vocabulary size).
--quant fp8-block writes the linear layers (attention, MLP, experts) as
Qwen3-FP8 stores them: F8_E4M3 weights (one block of random E4M3 values,
normal with std 1 rounded to the E4M3 grid) and a BF16 weight_scale_inv of
0.02 per 128 x 128 block, with config.json's quantization_config; the
embeddings, norms, routers and lm_head stay BF16. --quant w4a16 writes
them as compressed-tensors pack-quantized W4A16 (RedHatAI's layout:
symmetric int4, groups of 128): weight_packed I32 [out, in/8] of random
nibbles, weight_scale BF16 [out, in/128] of 0.004, weight_shape I64.
"""
import bisect
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


def e4m3(b):
    """The value of E4M3 byte b (NaN for 0x7f and 0xff)."""
    s, e, m = b >> 7, (b >> 3) & 15, b & 7
    if e == 15 and m == 7:
        return float("nan")
    v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
    return -v if s else v


def f8_block(n, seed=0):
    """n E4M3 bytes: normal samples (std 1) rounded to the nearest value."""
    grid = sorted((e4m3(b), b) for b in range(256) if (b & 0x7f) != 0x7f)
    vals = [v for v, _ in grid]
    rng = random.Random(seed)
    out = bytearray()
    for _ in range(n):
        x = rng.gauss(0.0, 1.0)
        i = bisect.bisect_left(vals, x)
        if i == len(vals) or (i > 0 and x - vals[i - 1] < vals[i] - x):
            i -= 1
        out.append(grid[i][1])
    return bytes(out)


def is_linear(n):
    """A linear layer's weight: quantized by --quant fp8-block."""
    return n.endswith("_proj.weight") or any(n.endswith(f".{w}.weight") for w in ("w1", "w2", "w3"))


def main():
    args = sys.argv[1:]
    quant = None
    if len(args) >= 2 and args[0] == "--quant":
        quant, args = args[1], args[2:]
    if len(args) != 2 or args[0] not in SHAPES or \
            quant not in (None, "bf16", "fp8-block", "w4a16"):
        sys.exit("usage: make-synthetic.py [--quant fp8-block|w4a16] {%s} OUTDIR" %
                 ",".join(SHAPES))
    name, out = args
    fp8, w4 = quant == "fp8-block", quant == "w4a16"
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
    if fp8:  # each linear weight F8_E4M3, its block scales beside it
        quantized = []
        for n, shape in tensors:
            quantized.append((n, shape))
            if is_linear(n):
                quantized.append((n[:-len("weight")] + "weight_scale_inv",
                                  [(shape[0] + 127) // 128, (shape[1] + 127) // 128]))
        tensors = quantized
    shapes = {}  # weight_shape tensor: the [out, in] it holds
    if w4:  # each linear weight packed, its group scales and shape beside it
        quantized = []
        for n, shape in tensors:
            if not is_linear(n):
                quantized.append((n, shape))
                continue
            b = n[:-len("weight")]
            quantized += [(b + "weight_packed", [shape[0], shape[1] // 8]),
                          (b + "weight_scale", [shape[0], (shape[1] + 127) // 128]),
                          (b + "weight_shape", [2])]
            shapes[b + "weight_shape"] = shape
        tensors = quantized
    header, off = {}, 0
    for n, shape in tensors:
        f8 = fp8 and is_linear(n)
        dt, size = ("F8_E4M3", 1) if f8 else ("I32", 4) if n.endswith("weight_packed") else \
            ("I64", 8) if n.endswith("weight_shape") else ("BF16", 2)
        for d in shape:
            size *= d
        header[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + size]}
        off += size
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    os.makedirs(out, exist_ok=True)
    block = bf16_block(1 << 20)
    ones = struct.pack("<H", 0x3F80) * (1 << 16)  # norm weights: 1.0
    f8 = f8_block(1 << 20) if fp8 else b""
    scales = struct.pack("<H", 0x3CA4) * (1 << 16)  # BF16 0.02
    scales4 = struct.pack("<H", 0x3B83) * (1 << 16)  # BF16 0.004: q - 8 in -8..7
    nibbles = random.Random(1).randbytes(1 << 20) if w4 else b"" 
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for n, shape in tensors:
            size = header[n]["data_offsets"][1] - header[n]["data_offsets"][0]
            src = ones if n.endswith("norm.weight") else \
                scales if n.endswith("weight_scale_inv") else \
                scales4 if n.endswith("weight_scale") else \
                nibbles if n.endswith("weight_packed") else \
                struct.pack("<qq", *shapes[n]) if n in shapes else \
                f8 if fp8 and is_linear(n) else block
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
    if fp8:
        cfg["quantization_config"] = {
            "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": ["lm_head"]}  # routers: plain BF16, no scales
    if w4:
        cfg["quantization_config"] = {
            "quant_method": "compressed-tensors", "format": "pack-quantized",
            "quantization_status": "compressed",
            "config_groups": {"group_0": {
                "targets": ["Linear"], "input_activations": None,
                "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                            "group_size": 128, "symmetric": True, "dynamic": False}}},
            "ignore": ["lm_head"]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    here = os.path.dirname(os.path.abspath(__file__))
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(here, "..", "models", "default", fn), out)
    kind = "FP8 and BF16" if fp8 else "int4 and BF16" if w4 else "BF16"
    print(f"{name}: {off / 1e9:.2f} GB of {kind} weights in {out}")


if __name__ == "__main__":
    main()
