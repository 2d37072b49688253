#!/usr/bin/env python3
"""gen-embed-golden.py - the embedding-model fixture (issue 21: /v1/embeddings).

Run where PyTorch, transformers (5.x) and tokenizers are installed (the GPU
machine; the CPU is enough):

    python3 scripts/gen-embed-golden.py OUTDIR

Writes OUTDIR/qwen3-embed: a tiny Qwen3 embedding model laid out as the Hub
stores Qwen3-Embedding (a Qwen3Model with no LM head, so tensor names have
no "model." prefix; architectures ["Qwen3Model"]; the sentence-transformers
files modules.json, 1_Pooling/config.json with last-token pooling, and a
Normalize module), BF16 random weights, the shipped default model's
tokenizer, and expected.json: for each input its token ids (with the
tokenizer's special tokens) and the reference embeddings computed in
float64 from the BF16 weights: last-token pooling and mean pooling, both
L2-normalized as the Normalize module does.
"""
import json
import os
import shutil
import sys

import torch
import transformers

INPUTS = ["Hello world", "The meaning of life is", "a",
          "Instruct: find the fortune\nQuery: what is luck?"]


def main():
    out = os.path.join(sys.argv[1], "qwen3-embed")
    here = os.path.dirname(os.path.abspath(__file__))
    tokdir = os.path.join(here, "..", "models", "default")
    os.makedirs(out, exist_ok=True)
    cfg = transformers.Qwen3Config(
        vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rms_norm_eps=1e-6, tie_word_embeddings=True)
    cfg.architectures = ["Qwen3Model"]
    torch.manual_seed(21)
    model = transformers.Qwen3Model(cfg)
    with torch.no_grad():  # weights large enough that the layers matter
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.15)
            else:
                p.uniform_(0.8, 1.2)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, fn), out)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    with open(os.path.join(out, "modules.json"), "w") as f:
        json.dump(modules, f, indent=2)
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    pool = {"word_embedding_dimension": 64, "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": True, "include_prompt": True}
    with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
        json.dump(pool, f, indent=2)
    os.makedirs(os.path.join(out, "2_Normalize"), exist_ok=True)

    tok = transformers.AutoTokenizer.from_pretrained(out)
    ref = model.to(torch.float64).eval()
    cases = []
    with torch.no_grad():
        for text in INPUTS:
            ids = tok(text, add_special_tokens=True)["input_ids"]
            h = ref(torch.tensor([ids])).last_hidden_state[0]
            last = torch.nn.functional.normalize(h[-1], dim=0)
            mean = torch.nn.functional.normalize(h.mean(dim=0), dim=0)
            cases.append({"input": text, "ids": ids, "last": last.tolist(), "mean": mean.tolist()})
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "cases": cases}, f)
    print("wrote", out, sorted(os.listdir(out)))


if __name__ == "__main__":
    main()
