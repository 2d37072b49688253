#!/usr/bin/env python3
"""gen-hybrid-golden.py - golden fixtures for the hybrid Gated-DeltaNet +
attention MoE families (issue 23): qwen3_next and the text model of
qwen3_5_moe.

Run on a machine with PyTorch and transformers 5.17 (the GPU machine);
no network and no GPU needed (the reference runs on the CPU in float64):

    python3 scripts/gen-hybrid-golden.py OUTDIR [NAME...]

It writes OUTDIR/golden/<name>/ in the format of scripts/gen-golden.py
(config.json, generation_config.json, model.safetensors, the fixtures'
tokenizer, expected.json + logits-*.bin, the greedy continuation with
the near-tie redraw rule and the router-gap rule of gen-moe-golden.py,
whose write_case it uses). The sequences are gen-moe-golden.py's plus
one of 150 tokens, which crosses two 64-token chunks of the delta rule's
chunked form. qwen3-next-bf16 and qwen3-5-moe then get an MTP head
(scripts/add-mtp-head.py: random and echo). The tensor names and shapes
and config.json are printed,
so the loader can be written against what transformers writes.

With OUTDIR/src, the transformers modeling and configuration sources of
both families are copied there too, to be read (never committed: they
are transformers' code, the reference for the semantics).
"""
import importlib.util
import os
import shutil
import subprocess
import sys
import traceback

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("gen_moe_golden", os.path.join(HERE, "gen-moe-golden.py"))
moe = importlib.util.module_from_spec(spec)
sys.path.insert(0, HERE)
spec.loader.exec_module(moe)

HYBRID_CONFIGS = {"qwen3_next": "Qwen3NextConfig", "qwen3_5_moe_text": "Qwen3_5MoeTextConfig"}
_moe_config_class = moe.config_class


def config_class(family):
    """gen-moe-golden.py's config_class, knowing the hybrid families too."""
    if family in HYBRID_CONFIGS:
        return getattr(transformers, HYBRID_CONFIGS[family])
    return _moe_config_class(family)


moe.config_class = config_class


def copy_sources(out):
    """transformers' sources of the two families, for reading."""
    root = os.path.dirname(transformers.__file__)
    dst = os.path.join(out, "src")
    os.makedirs(dst, exist_ok=True)
    for fam in ("qwen3_next", "qwen3_5_moe", "qwen3_5"):
        d = os.path.join(root, "models", fam)
        if not os.path.isdir(d):
            print(f"no transformers/models/{fam}", flush=True)
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith(".py"):
                shutil.copy(os.path.join(d, f), os.path.join(dst, f"{fam}__{f}"))
                print(f"copied {fam}/{f}", flush=True)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "out"
    torch.set_default_dtype(torch.float32)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    if os.environ.get("HYBRID_SOURCES", "1") == "1":
        try:
            copy_sources(out)
        except Exception:
            traceback.print_exc()
    tok_dir = moe.find_tokenizer(moe.REPO)
    V, eos = moe.tokenizer_vocab(tok_dir)
    g = torch.Generator().manual_seed(7)
    seqs = [
        [int(x) for x in torch.randint(0, V, (1,), generator=g)],
        [int(x) for x in torch.randint(0, V, (7,), generator=g)],
        [int(x) for x in torch.randint(0, V, (40,), generator=g)],
        [int(x) for x in torch.randint(0, V, (150,), generator=g)],
    ]
    gold = os.path.join(out, "golden")
    os.makedirs(gold, exist_ok=True)
    common = dict(vocab_size=V, bos_token_id=None, eos_token_id=eos, rms_norm_eps=1e-6,
                  hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=512, rope_theta=10000.0, partial_rotary_factor=0.25,
                  tie_word_embeddings=False)
    hybrid = dict(
        num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention",
                     "full_attention"],
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        intermediate_size=96, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=48,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        **common)
    cases = [
        ("qwen3-next", "qwen3_next", 31, torch.float32, 2, dict(hybrid)),
        # one dense layer among them, BF16 weights
        ("qwen3-next-bf16", "qwen3_next", 32, torch.bfloat16, 2,
         dict(hybrid, mlp_only_layers=[1])),
        ("qwen3-5-moe", "qwen3_5_moe_text", 33, torch.float32, 2, dict(hybrid)),
    ]
    # the MTP head each committed fixture carries (transformers writes
    # none): scripts/add-mtp-head.py, after the case is written
    heads = {"qwen3-next-bf16": "random", "qwen3-5-moe": "echo"}
    only = set(sys.argv[2:])
    failed = []
    for name, family, seed, wdtype, k, kw in cases:
        if only and name not in only:
            continue
        try:
            moe.write_case(name, family, gold, tok_dir, seed, wdtype, seqs, k,
                           kw["num_experts"], **kw)
            if name in heads:
                add = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                   "add-mtp-head.py")
                subprocess.run([sys.executable, add, os.path.join(gold, name),
                                "--kind", heads[name]], check=True)
        except Exception:
            traceback.print_exc()
            print(f"FAILED {name}", flush=True)
            failed.append(name)
    print("done" + (f", failed: {' '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
