#!/usr/bin/env python3
"""gen-golden.py - build the golden fixtures and the default model.

Run on a machine with PyTorch, transformers (5.x) and tokenizers; no
network and no GPU needed (everything is computed on the CPU):

    python3 scripts/gen-golden.py OUTDIR

It writes, under OUTDIR:
  tokenizer/            a byte-level BPE tokenizer trained here (Qwen2-style
                        pre-tokenizer regex, no normalizer), plus
                        tok_cases.json: reference ids for a set of strings
  golden/<name>/        one small random-weight HF checkpoint per case
                        (config.json, generation_config.json,
                        model.safetensors, tokenizer files) and
                        expected.json + logits-*.bin: reference logits of
                        fixed token sequences (float64 forward pass,
                        stored as little-endian float32 [T, vocab]) and the
                        greedy continuation of 32 tokens
  default/              the small default model that ships in the repo

The weights are drawn with a fixed seed, so a re-run reproduces the same
files. The greedy reference is checked for near-ties: a case whose top-2
logit margin drops under MIN_MARGIN at any step is redrawn with the next
seed, so the comparison cannot flip on rounding.
"""
import json
import os
import shutil
import sys

import torch
import transformers

from golden_ref import (MIN_MARGIN_16, N_GREEDY, QWEN2_PATTERN, SPECIALS,
                        greedy, rope_buffers, to_reference)
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

MAX_SEEDS = 400


def corpus(limit=6_000_000):
    """Deterministic English-ish text available offline: the Python
    standard library's own sources and docstrings, in sorted order."""
    root = os.path.dirname(os.__file__)
    paths = []
    for d, _, files in os.walk(root):
        if "site-packages" in d or "test" in d:
            continue
        paths += [os.path.join(d, f) for f in files if f.endswith(".py")]
    total = 0
    for p in sorted(paths):
        try:
            with open(p, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        total += len(text)
        yield text
        if total > limit:
            return


def train_tokenizer(out):
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024 - len(SPECIALS), min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_special_tokens(SPECIALS)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    os.makedirs(out, exist_ok=True)
    fast.save_pretrained(out)
    return fast


TOK_STRINGS = [
    "", "Hello, world!", "The meaning of life is", "  leading spaces", "trailing   ",
    "tabs\tand\nnewlines\r\n\r\nend", "def f(x):\n    return x ** 2  # square\n",
    '{"key": [1, 2, 3], "nested": {"a": null}}', "1234567890 3.14159 -42 1e-9",
    "naïve café résumé", "日本語のテキスト", "中文分词测试", "한국어 텍스트",
    "مرحبا بالعالم", "emoji 😀👍🏽 and 👨‍👩‍👧‍👦 family", "combining e\u0301 and a\u0308",
    "<|endoftext|>", "user text <|im_start|>system\nhi<|im_end|> more",
    "x" * 200, " " * 40 + "word", "I'm sure they've said it's what we'd do, we'll see",
    "UPPER CASE DON'T WON'T", "mixed123abc456", "a\u00a0b\u2003c", "\u200b zero width",
    "https://example.org/path?q=1&r=2#frag", "C:\\Users\\name\\file.txt",
    "for (int i = 0; i < n; i++) { sum += a[i]; }", "#include <stdio.h>\n",
    "Ωμέγα ελληνικά", "Привет, мир!", "שלום עולם", "ç̧̧", "\U0001F600" * 5,
]


def tok_cases(fast, out):
    import random
    rng = random.Random(1234)
    strings = list(TOK_STRINGS)
    words = ["the", "model", " 42", "ü", "日本", "😀", "\n", "  ", "\t", "Hello", "'s", "x=1;",
             "<|im_end|>", "café", "١٢٣", "e\u0301"]
    for _ in range(200):
        strings.append("".join(rng.choice(words) for _ in range(rng.randint(1, 12))))
    cases = []
    for s in strings:
        ids = fast(s, add_special_tokens=True)["input_ids"]
        if fast.decode(ids) != s:
            print(f"warning: {s!r} does not round-trip through decode", flush=True)
        cases.append({"text": s, "ids": ids})
    with open(os.path.join(out, "tok_cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=0)


# ---------------------------------------------------------------- models

def make_config(family, **kw):
    cls = {
        "llama": transformers.LlamaConfig,
        "mistral": transformers.MistralConfig,
        "qwen2": transformers.Qwen2Config,
        "qwen3": transformers.Qwen3Config,
    }[family]
    rope = kw.pop("rope", {"rope_type": "default"})
    theta = kw.pop("rope_theta", 10000.0)
    rope = dict(rope, rope_theta=theta)
    try:
        cfg = cls(rope_parameters=rope, **kw)
    except TypeError:  # a transformers 4.x install
        scaling = None if rope["rope_type"] == "default" else {
            k: v for k, v in rope.items() if k != "rope_theta"}
        cfg = cls(rope_theta=theta, rope_scaling=scaling, **kw)
    return cfg


def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                # rows of varied norm (log-normal) give the output layer a few
                # clear favourites, so greedy choices are not near-ties
                rows = torch.exp(0.7 * torch.randn((p.shape[0], 1), generator=g))
                scale = 1.0 if "embed_tokens" in name else 1.0 / p.shape[-1] ** 0.5
                p.copy_(torch.randn(p.shape, generator=g) * rows * scale)
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)


def hf4_config(cfg_dict):
    """The same config as transformers 4.x would have written it."""
    d = dict(cfg_dict)
    rp = dict(d.pop("rope_parameters"))
    d["rope_theta"] = rp.pop("rope_theta")
    d["rope_scaling"] = None if rp.get("rope_type", "default") == "default" else rp
    if "dtype" in d:
        d["torch_dtype"] = d.pop("dtype")
    d["transformers_version"] = "4.46.0"
    return d


def write_case(name, family, out, tok_dir, seed, wdtype, seqs, gen_extra=None, **cfg_kw):
    for attempt in range(MAX_SEEDS):
        s = seed + 1000 * attempt
        torch.manual_seed(s)
        cfg = make_config(family, **cfg_kw)
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, dtype=torch.float32, attn_implementation="eager")
        init_weights(model, s)
        saved = rope_buffers(model)
        model = model.to(wdtype)
        ref = to_reference(model, saved)  # reference from the stored (rounded) values
        ref.eval()
        prompt = seqs[-1][:8]
        toks, margin = greedy(ref, prompt, N_GREEDY)
        if toks is not None:
            break
    else:
        raise SystemExit(f"{name}: no seed without near-ties")
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    model = model.to(wdtype)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id, **(gen_extra or {}))
    model.save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, f), d)
    ref = to_reference(model, saved)
    cases = []
    with torch.no_grad():
        for i, ids in enumerate(seqs):
            logits = ref(torch.tensor([ids]), use_cache=False).logits[0]
            fn = f"logits-{i}.bin"
            with open(os.path.join(d, fn), "wb") as f:
                f.write(logits.to(torch.float32).numpy().astype("<f4").tobytes())
            cases.append({"ids": ids, "logits": fn, "shape": list(logits.shape)})
    exp = {
        "family": family, "seed": s, "weights_dtype": str(wdtype).replace("torch.", ""),
        "transformers": transformers.__version__, "torch": torch.__version__,
        "reference": "float64 forward pass on the CPU, eager attention",
        "cases": cases,
        "greedy": {"prompt": prompt, "tokens": toks, "min_margin": margin,
                   "min_margin_first16_vs_std": MIN_MARGIN_16},
    }
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
    print(f"{name}: {sum(p.numel() for p in model.parameters())} params, seed {s} "
          f"(attempt {attempt + 1}), greedy margin {margin:.3g}", flush=True)
    return d


def write_hf4_twin(src, dst):
    """A directory whose config.json is the 4.x spelling of src's, with
    the same weights (symlinked), checked to give the same logits."""
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    with open(os.path.join(src, "config.json")) as f:
        d = hf4_config(json.load(f))
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(d, f, indent=2)
    for fn in os.listdir(src):
        if fn != "config.json":
            os.symlink(os.path.join("..", os.path.basename(src), fn), os.path.join(dst, fn))
    a = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float64)
    b = transformers.AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float64)
    x = torch.tensor([[1, 2, 3, 200, 300, 400, 5, 6, 7, 8] * 8])
    with torch.no_grad():
        diff = (a(x).logits - b(x).logits).abs().max().item()
    assert diff == 0.0, f"4.x config of {src} changes the logits by {diff}"
    print(f"{os.path.basename(dst)}: 4.x-style config gives identical logits", flush=True)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "out"
    torch.set_default_dtype(torch.float32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    tok_dir = os.path.join(out, "tokenizer")
    fast = train_tokenizer(tok_dir)
    tok_cases(fast, tok_dir)
    V = len(fast)
    eos = fast.convert_tokens_to_ids("<|endoftext|>")
    print(f"tokenizer: {V} tokens, eos {eos}", flush=True)

    g = torch.Generator().manual_seed(7)
    seqs = [
        [int(x) for x in torch.randint(0, V, (1,), generator=g)],
        [int(x) for x in torch.randint(0, V, (7,), generator=g)],
        [int(x) for x in torch.randint(0, V, (40,), generator=g)],
    ]
    gold = os.path.join(out, "golden")
    os.makedirs(gold, exist_ok=True)
    common = dict(vocab_size=V, bos_token_id=None, eos_token_id=eos, rms_norm_eps=1e-6)
    d = write_case("llama3", "llama", gold, tok_dir, 11, torch.float32, seqs,
                   hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                   tie_word_embeddings=False, rope_theta=10000.0,
                   rope={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                   **common)
    write_hf4_twin(d, os.path.join(gold, "llama3-hf4"))
    write_case("llama-tied", "llama", gold, tok_dir, 12, torch.float32, seqs,
               hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
               tie_word_embeddings=True, rope_theta=500000.0, **common)
    write_case("mistral", "mistral", gold, tok_dir, 13, torch.float32, seqs,
               hidden_size=64, intermediate_size=192, num_hidden_layers=2,
               num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
               tie_word_embeddings=False, sliding_window=None, rope_theta=1000000.0, **common)
    write_case("qwen2", "qwen2", gold, tok_dir, 14, torch.float32, seqs,
               hidden_size=64, intermediate_size=160, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
               tie_word_embeddings=True, rope_theta=1000000.0, use_sliding_window=False, **common)
    d = write_case("qwen3", "qwen3", gold, tok_dir, 15, torch.float32, seqs,
                   hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   max_position_embeddings=512, tie_word_embeddings=True,
                   rope_theta=1000000.0, **dict(common, vocab_size=V + 64))
    write_hf4_twin(d, os.path.join(gold, "qwen3-hf4"))
    write_case("qwen3-bf16", "qwen3", gold, tok_dir, 16, torch.bfloat16, seqs,
               hidden_size=128, intermediate_size=384, num_hidden_layers=4,
               num_attention_heads=4, num_key_value_heads=2, head_dim=32,
               max_position_embeddings=1024, tie_word_embeddings=False,
               rope_theta=1000000.0, **common)

    # The default model: same family and size class as qwen3-bf16, with
    # sampling defaults in generation_config.json.
    d = write_case("default", "qwen3", out, tok_dir, 17, torch.bfloat16, seqs,
                   gen_extra=dict(do_sample=True, temperature=0.8, top_k=40, top_p=0.95),
                   hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   max_position_embeddings=2048, tie_word_embeddings=True,
                   rope_theta=1000000.0, **common)
    for fn in os.listdir(d):
        if fn.startswith("logits-") or fn == "expected.json":
            os.remove(os.path.join(d, fn))
    print("done", flush=True)


if __name__ == "__main__":
    main()
