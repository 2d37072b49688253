#!/usr/bin/env python3
"""gen-quant-golden.py - build the quantized-checkpoint golden fixtures
(issue 19): one tiny random Qwen3 model per format, its linear layers
stored exactly as the Hub stores that format, and the transformers
reference computed in float64 from the dequantized weights W = dequant(q).

Run on a machine with PyTorch and transformers (5.x); no network and no
GPU needed:

    python3 scripts/gen-quant-golden.py OUTDIR [NAME...]

It writes OUTDIR/golden/quant-<format>/ in the format of
scripts/gen-golden.py (config.json with its quantization_config,
model.safetensors, the tokenizer files, expected.json + logits-*.bin,
a greedy continuation with the near-tie redraw rule). Embeddings, norms
and lm_head stay BF16, as in the real checkpoints; the q/k/v/o and MLP
projections of every layer are quantized:

  quant-fp8        quant_method fp8, weight_block_size [32, 32] (partial
                   edge blocks: the MLP width is 80), F8_E4M3 + F32
                   weight_scale_inv
  quant-ct-fp8     compressed-tensors float-quantized, channel strategy,
                   BF16 weight_scale [out, 1]
  quant-awq        AWQ gemm, 4 bits, group 16, zero points
  quant-gptq       GPTQ v1, 4 bits, group 16, desc_act with a permuted
                   g_idx, symmetric (zeros stored as 7)
  quant-gptq-g32   GPTQ v1, 4 bits, group 32 (the MLP's 80 inputs end in
                   a partial group), no act order, asymmetric: the layout
                   the native 4-bit kernels take (W4B)
  quant-ct-w4a16   compressed-tensors pack-quantized, 4 bits, group 16,
                   asymmetric (packed zero points)
  quant-nvfp4      ModelOpt NVFP4 (E2M1 pairs, F8 scale per 16, F32 global)
  quant-ct-nvfp4   compressed-tensors nvfp4-pack-quantized (the global
                   scale divides)

The packing rules are written here from the formats' definitions (the
same ones lib/io/quant.h documents), independently of the C loader.
"""
import json
import os
import shutil
import sys
import traceback

import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_ref import (MIN_MARGIN_16, N_GREEDY, find_tokenizer, greedy,  # noqa: E402
                        rope_buffers, to_reference, write_logits)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_SEEDS = 120
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
G = 16  # group size of the 4-bit formats
F8MAX = 448.0
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble n holds column 8p + AWQ_ORDER[n]


def to_i32(x):
    """int64 values in [0, 2^32) as the int32 bit patterns."""
    x = x.to(torch.int64) & 0xFFFFFFFF
    return torch.where(x >= 2 ** 31, x - 2 ** 32, x).to(torch.int32)


def pack_rows(v, bits):
    """v [R, C] (C % (32/bits) == 0), values < 2^bits: field k of word
    [r][c/pack] holds v[r][c] for c % pack == k (packed along C)."""
    pack = 32 // bits
    R, C = v.shape
    v = v.to(torch.int64).reshape(R, C // pack, pack)
    word = torch.zeros(R, C // pack, dtype=torch.int64)
    for k in range(pack):
        word |= v[:, :, k] << (bits * k)
    return to_i32(word)


def f8(x):
    return x.to(torch.float32).clamp(-F8MAX, F8MAX).to(torch.float8_e4m3fn)


# --- the formats: each returns (tensors for module prefix P, W dequantized) ---

def q_fp8(W, prefix):
    bo = bi = 32
    out, inn = W.shape
    nbo, nbi = -(-out // bo), -(-inn // bi)
    s = torch.zeros(nbo, nbi, dtype=torch.float32)
    q = torch.zeros(out, inn, dtype=torch.float8_e4m3fn)
    for a in range(nbo):
        for b in range(nbi):
            blk = W[a * bo:(a + 1) * bo, b * bi:(b + 1) * bi]
            sc = float(blk.abs().max()) / F8MAX or 1.0
            s[a, b] = sc
            q[a * bo:(a + 1) * bo, b * bi:(b + 1) * bi] = f8(blk / sc)
    sr = s.repeat_interleave(bo, 0)[:out].repeat_interleave(bi, 1)[:, :inn].double()
    return {prefix + ".weight": q, prefix + ".weight_scale_inv": s}, q.double() * sr


def q_ct_fp8(W, prefix):
    s = (W.abs().amax(1, keepdim=True) / F8MAX).clamp(min=1e-8).to(torch.bfloat16)
    q = f8(W / s.double())
    return {prefix + ".weight": q, prefix + ".weight_scale": s}, q.double() * s.double()


def group_minmax(W, g):
    """Per (out, group of g inputs): scale and zero for 4-bit asymmetric."""
    out, inn = W.shape
    Wg = W.reshape(out, inn // g, g)
    lo, hi = Wg.amin(2).clamp(max=0), Wg.amax(2).clamp(min=0)
    s = ((hi - lo) / 15).clamp(min=1e-8)
    return s, lo


def q_awq(W, prefix):
    out, inn = W.shape
    s, lo = group_minmax(W, G)
    s = s.to(torch.float16).double()
    z = torch.round(-lo / s).clamp(0, 15)
    sx, zx = s.repeat_interleave(G, 1), z.repeat_interleave(G, 1)  # [out, in]
    q = (torch.round(W / sx) + zx).clamp(0, 15)
    Wd = (q - zx) * sx
    qt, zt = q.t().contiguous(), z.t().contiguous()  # [in, out], [in/g, out]

    def pack_awq(v):  # v [R, out]: columns 8p..8p+7 into word p, AWQ order
        R = v.shape[0]
        v = v.to(torch.int64).reshape(R, out // 8, 8)
        word = torch.zeros(R, out // 8, dtype=torch.int64)
        for n in range(8):
            word |= v[:, :, AWQ_ORDER[n]] << (4 * n)
        return to_i32(word)
    return {prefix + ".qweight": pack_awq(qt), prefix + ".qzeros": pack_awq(zt),
            prefix + ".scales": s.t().contiguous().to(torch.float16)}, Wd


def q_gptq(W, prefix, seed, g=G, act_order=True, sym=True):
    """GPTQ v1: with act_order the input rows are taken in a random order
    (g_idx permuted), without it g_idx is i / g (a partial last group
    where g does not divide in); sym stores the zero 8 as 7, asymmetric
    groups their min/max zero (1..15: v1 stores zero - 1)."""
    out, inn = W.shape
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(inn, generator=gen) if act_order else torch.arange(inn)
    rank = torch.empty(inn, dtype=torch.int64)
    rank[perm] = torch.arange(inn)
    g_idx = (rank // g).to(torch.int32)  # group of input row i
    ng = (inn + g - 1) // g
    s = torch.zeros(ng, out, dtype=torch.float64)
    z = torch.full((ng, out), 8.0, dtype=torch.float64)
    for gi in range(ng):
        cols = (g_idx == gi).nonzero().flatten()
        if sym:
            s[gi] = (W[:, cols].abs().amax(1) / 7).clamp(min=1e-8)
        else:
            lo, hi = W[:, cols].amin(1).clamp(max=0), W[:, cols].amax(1).clamp(min=0)
            s[gi] = ((hi - lo) / 15).clamp(min=1e-8)
    s = s.to(torch.float16).double()
    if not sym:
        for gi in range(ng):
            cols = (g_idx == gi).nonzero().flatten()
            z[gi] = torch.round(-W[:, cols].amin(1).clamp(max=0) / s[gi]).clamp(1, 15)
    sx, zx = s[g_idx.long()].t(), z[g_idx.long()].t()  # [out, in]
    q = (torch.round(W / sx) + zx).clamp(0, 15)
    Wd = (q - zx) * sx
    zeros = (z - 1).to(torch.int64)  # v1: zero - 1
    return {prefix + ".qweight": pack_cols_in(q, 4),
            prefix + ".qzeros": pack_rows(zeros, 4),
            prefix + ".scales": s.to(torch.float16),
            prefix + ".g_idx": g_idx}, Wd


def pack_cols_in(q, bits):
    """GPTQ qweight [in/pack, out]: element (i, o) in field i % pack of
    word [i / pack][o] (packed along the input dim); q is [out, in]."""
    pack = 32 // bits
    out, inn = q.shape
    v = q.t().to(torch.int64).reshape(inn // pack, pack, out)
    word = torch.zeros(inn // pack, out, dtype=torch.int64)
    for k in range(pack):
        word |= v[:, k, :] << (bits * k)
    return to_i32(word)


def q_ct_w4a16(W, prefix):
    out, inn = W.shape
    s, lo = group_minmax(W, G)
    s = s.to(torch.bfloat16).double()
    z = (torch.round(-lo / s) - 8).clamp(-8, 7)  # signed zero point
    sx, zx = s.repeat_interleave(G, 1), z.repeat_interleave(G, 1)
    q = (torch.round(W / sx) + zx).clamp(-8, 7)  # signed values
    Wd = (q - zx) * sx
    zp = pack_rows((z + 8).t().contiguous(), 4).t().contiguous()  # [out/8, in/g]: packed along out
    return {prefix + ".weight_packed": pack_rows(q + 8, 4),
            prefix + ".weight_scale": s.to(torch.bfloat16),
            prefix + ".weight_zero_point": zp,
            prefix + ".weight_shape": torch.tensor([out, inn], dtype=torch.int64)}, Wd


def e2m1_round(x):
    """Nearest E2M1 value (ties to the lower magnitude index), as index 0..15."""
    mag = x.abs().clamp(max=6.0)
    idx = (mag.unsqueeze(-1) - E2M1).abs().argmin(-1)
    return torch.where(x < 0, idx + 8, idx)


def e2m1_value(code):
    v = E2M1[(code & 7).long()]
    return torch.where(code >= 8, -v, v)


def q_nvfp4(W, prefix, ct):
    out, inn = W.shape
    s2 = float(W.abs().max()) / (F8MAX * 6.0)
    Wg = W.reshape(out, inn // 16, 16)
    sb = f8(Wg.abs().amax(2) / (6.0 * s2))  # [out, in/16] F8
    scale = sb.double().clamp(min=1e-30) * s2
    code = e2m1_round(Wg / scale.unsqueeze(-1)).reshape(out, inn)
    Wd = e2m1_value(code).reshape(out, inn // 16, 16) * (sb.double() * s2).unsqueeze(-1)
    Wd = Wd.reshape(out, inn)
    c = code.to(torch.int64).reshape(out, inn // 2, 2)
    packed = (c[:, :, 0] | (c[:, :, 1] << 4)).to(torch.uint8)  # low nibble: even element
    if ct:
        gs = torch.tensor([1.0 / s2], dtype=torch.float32)
        Wd = e2m1_value(code).reshape(out, inn // 16, 16) * \
            (sb.double() / float(gs[0])).unsqueeze(-1)
        return {prefix + ".weight_packed": packed, prefix + ".weight_scale": sb,
                prefix + ".weight_global_scale": gs}, Wd.reshape(out, inn)
    return {prefix + ".weight": packed, prefix + ".weight_scale": sb,
            prefix + ".weight_scale_2": torch.tensor(s2, dtype=torch.float32),
            prefix + ".input_scale": torch.tensor(1.0, dtype=torch.float32)}, Wd


def ct_config(fmt, weights):
    return {"quant_method": "compressed-tensors", "format": fmt,
            "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": None}},
            "ignore": ["lm_head"]}


FORMATS = {
    "quant-fp8": (lambda W, p, s: q_fp8(W, p),
                  {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                   "weight_block_size": [32, 32], "modules_to_not_convert": ["lm_head"]}),
    "quant-ct-fp8": (lambda W, p, s: q_ct_fp8(W, p),
                     ct_config("float-quantized", {"num_bits": 8, "type": "float",
                                                   "strategy": "channel", "symmetric": True,
                                                   "dynamic": False})),
    "quant-awq": (lambda W, p, s: q_awq(W, p),
                  {"quant_method": "awq", "bits": 4, "group_size": G, "zero_point": True,
                   "version": "gemm", "modules_to_not_convert": None}),
    "quant-gptq": (lambda W, p, s: q_gptq(W, p, s),
                   {"quant_method": "gptq", "bits": 4, "group_size": G, "desc_act": True,
                    "sym": True, "checkpoint_format": "gptq"}),
    "quant-ct-w4a16": (lambda W, p, s: q_ct_w4a16(W, p),
                       ct_config("pack-quantized", {"num_bits": 4, "type": "int",
                                                    "strategy": "group", "group_size": G,
                                                    "symmetric": False, "dynamic": False})),
    "quant-nvfp4": (lambda W, p, s: q_nvfp4(W, p, False),
                    {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                     "exclude_modules": ["lm_head"]}),
    "quant-ct-nvfp4": (lambda W, p, s: q_nvfp4(W, p, True),
                       ct_config("nvfp4-pack-quantized", {"num_bits": 4, "type": "float",
                                                          "strategy": "tensor_group",
                                                          "group_size": 16, "symmetric": True,
                                                          "dynamic": False})),
    "quant-gptq-g32": (lambda W, p, s: q_gptq(W, p, s, g=32, act_order=False, sym=False),
                       {"quant_method": "gptq", "bits": 4, "group_size": 32,
                        "desc_act": False, "sym": False, "checkpoint_format": "gptq"}),
}


def write_case(name, out, tok_dir, seed, seqs, V, eos):
    quant, qcfg = FORMATS[name]
    for attempt in range(MAX_SEEDS):
        s = seed + 1000 * attempt
        torch.manual_seed(s)
        cfg = transformers.Qwen3Config(
            vocab_size=V, hidden_size=64, intermediate_size=80, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
            max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=None,
            eos_token_id=eos, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, dtype=torch.float32, attn_implementation="eager")
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("norm.weight"):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                else:
                    p.copy_(torch.randn_like(p) / (p.shape[-1] ** 0.5))
        saved = rope_buffers(model)
        tensors = {}
        sd = model.state_dict()
        deq = {}
        for n, t in sd.items():
            mod = n[:-len(".weight")] if n.endswith(".weight") else None
            if mod and any(mod.endswith(l) for l in LINEARS):
                qt, Wd = quant(t.double(), mod, s + sum(mod.encode()) % 997)
                tensors.update(qt)
                deq[n] = Wd
            else:
                tensors[n] = t.to(torch.bfloat16)
                deq[n] = t.to(torch.bfloat16).double()
        ref = model.to(torch.float64)
        with torch.no_grad():
            for n, p in ref.named_parameters():
                p.copy_(deq[n])
        ref = to_reference(ref, saved)
        prompt = seqs[-1][:8]
        toks, margin = greedy(ref, prompt, N_GREEDY)
        if toks is not None:
            break
        print(f"  {name}: seed {s} redrawn (greedy margin {margin:.3g})", flush=True)
    else:
        raise RuntimeError(f"{name}: no seed without near-ties")
    with torch.no_grad():
        logits = [ref(torch.tensor([ids]), use_cache=False).logits[0] for ids in seqs]
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    conf = cfg.to_dict()
    conf["dtype"] = "bfloat16"
    conf["architectures"] = ["Qwen3ForCausalLM"]
    conf["quantization_config"] = qcfg
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=1)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": eos}, f)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, fn), d)
    cases = write_logits(d, seqs, logits)
    exp = {
        "family": "qwen3", "seed": s, "quantization": qcfg,
        "transformers": transformers.__version__, "torch": torch.__version__,
        "reference": "float64 forward pass on the CPU from the dequantized weights, eager "
                     "attention",
        "cases": cases,
        "greedy": {"prompt": prompt, "tokens": toks, "min_margin": margin,
                   "min_margin_first16_vs_std": MIN_MARGIN_16},
    }
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
    print(f"{name}: seed {s}, greedy margin {margin:.3g}, "
          f"{sum(t.numel() * t.element_size() for t in tensors.values())} bytes", flush=True)
    for k in sorted(tensors)[:12]:
        print(f"  tensor {k} {list(tensors[k].shape)} {tensors[k].dtype}", flush=True)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "out"
    torch.set_default_dtype(torch.float32)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    tok_dir = find_tokenizer(REPO)
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    ids = set(tj["model"]["vocab"].values()) | {a["id"] for a in tj.get("added_tokens", [])}
    V = max(ids) + 1
    eos = next(a["id"] for a in tj["added_tokens"] if a["content"] == "<|endoftext|>")
    g = torch.Generator().manual_seed(7)
    seqs = [
        [int(x) for x in torch.randint(0, V, (1,), generator=g)],
        [int(x) for x in torch.randint(0, V, (7,), generator=g)],
        [int(x) for x in torch.randint(0, V, (40,), generator=g)],
    ]
    gold = os.path.join(out, "golden")
    os.makedirs(gold, exist_ok=True)
    only = set(sys.argv[2:])
    failed = []
    for i, name in enumerate(FORMATS):
        if only and name not in only:
            continue
        try:
            write_case(name, gold, tok_dir, 31 + i, seqs, V, eos)
        except Exception:
            traceback.print_exc()
            print(f"FAILED {name}", flush=True)
            failed.append(name)
    print("done" + (f", failed: {' '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
