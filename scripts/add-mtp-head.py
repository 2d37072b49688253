#!/usr/bin/env python3
"""add-mtp-head.py - give a small hybrid test checkpoint a multi-token
prediction head (mtp.* tensors), as Qwen3-Next and Qwen3.5 checkpoints on
the Hub carry one beside the trunk.

transformers reads no MTP head (it drops mtp.* at load), so the golden
fixtures that gen-golden.py writes have none; this adds one to such a
directory in place: the tensors go into model.safetensors after the
trunk's, untouched, and config.json gains the head's layer count
(num_nextn_predict_layers for qwen3_next, mtp_num_hidden_layers for
Qwen3.5). Standard library only; deterministic for a given --seed.

  --kind random  every weight random (mean 0, the trunk's init scale):
                 drafts are almost never accepted, which tests the
                 rejection paths
  --kind echo    fc maps the hidden state through unchanged and the
                 layer adds nothing (o_proj and every down projection
                 zero): the head's logits are the output head's of
                 rmsnorm(rmsnorm(h) (1 + w_h)) (1 + w_n), h the trunk's
                 hidden state of the token before, which a test can
                 compute by hand (tests/unit/test-mtp.c); its drafts
                 mostly repeat the last token

Usage: scripts/add-mtp-head.py DIR [--kind random|echo] [--seed N]
"""
import argparse
import json
import os
import random
import struct


def read_st(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    meta = head.pop("__metadata__", None)
    data = b[8 + n:]
    tensors = {}
    for name, t in head.items():
        lo, hi = t["data_offsets"]
        tensors[name] = (t["dtype"], t["shape"], data[lo:hi])
    return tensors, meta


def write_st(path, tensors, meta):
    head, off, blobs = {}, 0, []
    if meta is not None:
        head["__metadata__"] = meta
    for name, (dt, shape, raw) in tensors.items():
        head[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def pack(dt, vals):
    if dt == "F32":
        return struct.pack("<%df" % len(vals), *vals)
    if dt == "BF16":
        out = bytearray()
        for v in vals:
            u = struct.unpack("<I", struct.pack("<f", v))[0]
            u += 0x7FFF + ((u >> 16) & 1)  # round to nearest even
            out += struct.pack("<H", (u >> 16) & 0xFFFF)
        return bytes(out)
    raise SystemExit("add-mtp-head: dtype %s is not handled" % dt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--kind", choices=["random", "echo"], default="random")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    cfg_path = os.path.join(a.dir, "config.json")
    st_path = os.path.join(a.dir, "model.safetensors")
    with open(cfg_path) as f:
        cfg = json.load(f)
    text = cfg.get("text_config", cfg)
    tensors, meta = read_st(st_path)
    tensors = {k: v for k, v in tensors.items() if not k.startswith("mtp.")}
    dt = tensors["lm_head.weight"][0]
    rng = random.Random(a.seed)
    D = text["hidden_size"]
    H, Hkv, hd = text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"]
    E, Fe = text["num_experts"], text["moe_intermediate_size"]
    Fs = text.get("shared_expert_intermediate_size", 0)
    scale = text.get("initializer_range", 0.02) * 5
    echo = a.kind == "echo"

    def add(name, shape, kind="w"):
        n = 1
        for s in shape:
            n *= s
        if kind == "norm":  # zero-centred norms: 0 is the identity scale
            vals = [rng.gauss(0, 0.1) for _ in range(n)]
        elif kind == "norm0":  # the embedding's, which echo leaves out
            vals = [0.0] * n if echo else [rng.gauss(0, 0.1) for _ in range(n)]
        elif kind == "zero" and echo:
            vals = [0.0] * n
        elif kind == "fc" and echo:  # [D, 2D]: columns D..2D the identity
            vals = [1.0 if c == D + r else 0.0 for r in range(D) for c in range(2 * D)]
        else:
            vals = [rng.gauss(0, scale) for _ in range(n)]
        tensors["mtp." + name] = (dt, list(shape), pack(dt, vals))

    add("fc.weight", [D, 2 * D], "fc")
    add("pre_fc_norm_embedding.weight", [D], "norm0")
    add("pre_fc_norm_hidden.weight", [D], "norm")
    add("norm.weight", [D], "norm")
    L = "layers.0."
    add(L + "input_layernorm.weight", [D], "norm")
    add(L + "post_attention_layernorm.weight", [D], "norm")
    add(L + "self_attn.q_proj.weight", [2 * H * hd, D])
    add(L + "self_attn.k_proj.weight", [Hkv * hd, D])
    add(L + "self_attn.v_proj.weight", [Hkv * hd, D])
    add(L + "self_attn.o_proj.weight", [D, H * hd], "zero")
    add(L + "self_attn.q_norm.weight", [hd], "norm")
    add(L + "self_attn.k_norm.weight", [hd], "norm")
    add(L + "mlp.gate.weight", [E, D])
    for e in range(E):
        add(L + "mlp.experts.%d.gate_proj.weight" % e, [Fe, D])
        add(L + "mlp.experts.%d.up_proj.weight" % e, [Fe, D])
        add(L + "mlp.experts.%d.down_proj.weight" % e, [D, Fe], "zero")
    if Fs:
        add(L + "mlp.shared_expert.gate_proj.weight", [Fs, D])
        add(L + "mlp.shared_expert.up_proj.weight", [Fs, D])
        add(L + "mlp.shared_expert.down_proj.weight", [D, Fs], "zero")
        add(L + "mlp.shared_expert_gate.weight", [1, D])
    write_st(st_path, tensors, meta)
    key = "num_nextn_predict_layers" if text.get("model_type") == "qwen3_next" \
        else "mtp_num_hidden_layers"
    text[key] = 1
    with open(cfg_path + ".tmp", "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(cfg_path + ".tmp", cfg_path)


if __name__ == "__main__":
    main()
