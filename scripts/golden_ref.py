"""golden_ref.py - what scripts/gen-golden.py and scripts/train-default.py
share: the tokenizer's pre-tokenizer regex and special tokens, and the
float64 reference (RoPE frequencies kept in float32, greedy continuation
with the near-tie rule). Imported by both; not run on its own."""
import torch

MIN_MARGIN = 2e-3      # smallest top-1/top-2 logit gap allowed anywhere (FP32 check)
MIN_MARGIN_16 = 0.08   # ... over the first 16 tokens, as a fraction of the logits' std:
                       # BF16 backends (CUDA) must reproduce those 16 tokens, and their
                       # logit error is about 1e-2 of the std
N_GREEDY = 32
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def rope_buffers(model):
    """The RoPE inverse frequencies as transformers computes them at init
    (float32). Module.to(dtype) casts buffers too, which would leave a
    bf16 model's reference with bf16-rounded frequencies; to_reference
    restores these after the cast, so the reference is what a float32
    RoPE gives."""
    return {n: b.detach().clone().float() for n, b in model.named_buffers()
            if n.endswith("inv_freq")}


def to_reference(model, saved):
    """The model in float64 (in place) with saved RoPE buffers restored."""
    model = model.to(torch.float64)
    bufs = dict(model.named_buffers())
    with torch.no_grad():
        for n, b in saved.items():
            bufs[n].copy_(b.to(torch.float64))
    return model.eval()


def greedy(model, prompt, n):
    """Greedy continuation and its smallest top-1/top-2 margin; None for
    the tokens as soon as a step is too close to a tie."""
    ids = list(prompt)
    margins = []
    with torch.no_grad():
        for i in range(n):
            logits = model(torch.tensor([ids]), use_cache=False).logits[0, -1]
            top = torch.topk(logits, 2)
            m = float(top.values[0] - top.values[1])
            if m < MIN_MARGIN or (i < 16 and m < MIN_MARGIN_16 * float(logits.std())):
                return None, m
            margins.append(m)
            ids.append(int(top.indices[0]))
    return ids[len(prompt):], min(margins)


def find_tokenizer(repo):
    """The fixtures' tokenizer directory: tests/fixtures/golden/tokenizer,
    else models/default (scripts/gen-moe-golden.py, gen-quant-golden.py)."""
    import os
    for d in (os.path.join(repo, "tests", "fixtures", "golden", "tokenizer"),
              os.path.join(repo, "models", "default")):
        if os.path.exists(os.path.join(d, "tokenizer.json")):
            return d
    raise SystemExit("no tokenizer: expected tests/fixtures/golden/tokenizer/tokenizer.json")


def tokenizer_vocab(tok_dir):
    """The fixtures' tokenizer's size (its largest id + 1, added tokens
    included) and its <|endoftext|> id, said on stdout."""
    import json
    import os
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    ids = set(tj["model"]["vocab"].values()) | {a["id"] for a in tj.get("added_tokens", [])}
    V = max(ids) + 1
    eos = next(a["id"] for a in tj["added_tokens"] if a["content"] == "<|endoftext|>")
    print(f"tokenizer {tok_dir}: {V} tokens, eos {eos}", flush=True)
    return V, eos


def write_logits(d, seqs, logits):
    """logits-<i>.bin (little-endian float32 [T, vocab]) for each sequence
    into directory d; returns expected.json's "cases" list."""
    import os
    cases = []
    for i, (ids, lg) in enumerate(zip(seqs, logits)):
        fn = f"logits-{i}.bin"
        with open(os.path.join(d, fn), "wb") as f:
            f.write(lg.to(torch.float32).numpy().astype("<f4").tobytes())
        cases.append({"ids": ids, "logits": fn, "shape": list(lg.shape)})
    return cases
