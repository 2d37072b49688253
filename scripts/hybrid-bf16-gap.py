#!/usr/bin/env python3
"""hybrid-bf16-gap.py - how far transformers itself lands from the float64
goldens when it runs in BF16 (or FP32), per fixture and case: the yardstick
for the CUDA backend's BF16 limits in tests/unit/test-golden.c. Run on
the GPU machine (PyTorch, transformers 5.17):

    python3 scripts/hybrid-bf16-gap.py tests/fixtures/golden/NAME...

Prints, per fixture, dtype and case, the relative L2 error of the logits
against the fixture's logits-*.bin (the float64 reference as float32),
as test-golden computes it for Atlas.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers

CLASSES = {"qwen3_next": "Qwen3NextForCausalLM", "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM"}


def load(d, dtype, dev):
    cfg = json.load(open(os.path.join(d, "config.json")))
    name = CLASSES.get(cfg["model_type"])
    cls = getattr(transformers, name) if name else transformers.AutoModelForCausalLM
    m = cls.from_pretrained(d, dtype=dtype, attn_implementation="eager")
    return m.to(dev).eval()


def main():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {dev}")
    for d in sys.argv[1:]:
        exp = json.load(open(os.path.join(d, "expected.json")))
        for dtype in (torch.bfloat16, torch.float32):
            m = load(d, dtype, dev)
            for c in exp["cases"]:
                ids = torch.tensor([c["ids"]], device=dev)
                with torch.no_grad():
                    got = m(ids).logits[0].float().cpu().numpy()
                ref = np.fromfile(os.path.join(d, c["logits"]), dtype="<f4").reshape(got.shape)
                l2 = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
                mx = float(np.abs(got - ref).max() / np.abs(ref).max())
                print(f"{os.path.basename(d)} {str(dtype)[6:]} {len(c['ids'])} tokens: "
                      f"relative L2 {l2:.3g}, max relative {mx:.3g}", flush=True)
            del m


if __name__ == "__main__":
    main()
