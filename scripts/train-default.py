#!/usr/bin/env python3
"""train-default.py - train the small default model (models/default).

Run on a machine with PyTorch, transformers (5.x) and tokenizers, with a
GPU (a CPU works with tiny settings), no network needed:

    sh scripts/make-corpus.sh                  # .corpus/fortunes.txt
    python3 scripts/train-default.py OUTDIR    # or scripts/gpu-train-default.sh

From the corpus (fortunes separated by blank lines) it holds out 5% of
the fortunes as the validation split and 2% as the dev split (chosen by a
hash of each fortune's text, so the split does not depend on the seed or
on the corpus order), trains a byte-level BPE tokenizer on the rest, then
trains one Qwen3ForCausalLM per entry of --grid (schedule length in
epochs, dropout), keeping each run's weights with the best dev loss, and
ships the run with the best dev loss. The validation split is used only
for the final report, never for a decision. Writes under OUTDIR:

  model/           config.json, generation_config.json, model.safetensors
                   (BF16), tokenizer.json, tokenizer_config.json (ChatML
                   template), README.md (the model card, measured numbers)
  golden-default/  expected.json + logits-*.bin: reference logits of fixed
                   token sequences for the shipped weights (float64 forward
                   on the CPU, as scripts/gen-golden.py) and a 32-token
                   greedy continuation; "model_dir": "models/default" tells
                   tests/unit/test-golden.c where the weights are
  train.json       every measured number

Deterministic given --seed (same corpus, same library versions, same
GPU kind), unless the --max-minutes guard cuts or skips a grid run; the
log says when it does. Dropout is applied by forward hooks during
training only; the saved model is a plain Qwen3 checkpoint.
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch
import torch.nn.functional as F
import transformers

from golden_ref import (MIN_MARGIN_16, N_GREEDY, QWEN2_PATTERN, SPECIALS,
                        greedy, rope_buffers, to_reference)
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

CHATML = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
GEN_DEFAULTS = dict(do_sample=True, temperature=0.8, top_p=0.95, top_k=40, repetition_penalty=1.1)
MAX_BYTES = 20_000_000      # the shipped directory, all files
PROMPT = "The meaning of life is"
GOLDEN_PROMPTS = [
    PROMPT, "Once upon a time", "A fool and his money", "The best way to",
    "Never trust a", "Computers are", "Life is", "There is no", "I have a",
    "In the beginning", "If you want to", "Love is", "The trouble with",
    "Why did the", "Q: What", "It is better to",
]


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------- data

def read_corpus(path):
    """The fortunes of make-corpus.sh's output: blank-line separated."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    docs = [d.strip("\n") for d in text.split("\n\n")]
    return [d for d in docs if d.strip()], len(text.encode("utf-8"))


def split_of(doc, val_frac, dev_frac):
    """'val', 'dev' or 'train', from a hash of the text: stable whatever
    the seed, the order or the rest of the corpus."""
    h = int.from_bytes(hashlib.sha1(doc.encode("utf-8")).digest()[:8], "big") / 2.0**64
    return "val" if h < val_frac else "dev" if h < val_frac + dev_frac else "train"


def train_tokenizer(docs, vocab, out):
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab - len(SPECIALS), min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(docs, trainer=trainer)
    tok.add_special_tokens(SPECIALS)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    os.makedirs(out, exist_ok=True)
    fast.save_pretrained(out)
    # the ChatML template goes into tokenizer_config.json itself (newer
    # transformers would write a chat_template.jinja file instead), and
    # the directory keeps only the two files Atlas reads
    cfg_path = os.path.join(out, "tokenizer_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["chat_template"] = CHATML
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    for fn in os.listdir(out):  # special_tokens_map.json, chat_template.jinja, ...
        if fn not in ("tokenizer.json", "tokenizer_config.json"):
            os.remove(os.path.join(out, fn))
    return tok, fast


def stream(tok, docs, eos):
    """Token ids of the documents, each followed by <|endoftext|>, after a
    leading <|endoftext|> (so the first fortune is predicted from it)."""
    ids = [eos]
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids += enc.ids
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------- model

def make_config(vocab, eos, a):
    kw = dict(vocab_size=vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
              num_hidden_layers=a.layers, num_attention_heads=a.heads,
              num_key_value_heads=a.kv_heads, head_dim=a.head_dim,
              max_position_embeddings=a.max_position, tie_word_embeddings=True,
              rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=eos)
    rope = {"rope_type": "default", "rope_theta": a.rope_theta}
    try:
        return transformers.Qwen3Config(rope_parameters=rope, **kw)
    except TypeError:  # a transformers 4.x install
        return transformers.Qwen3Config(rope_theta=a.rope_theta, **kw)


def add_dropout(model, p):
    """Dropout on the embeddings and on each attention and MLP output,
    as forward hooks: active in train() mode only, absent from the
    checkpoint."""
    def hook(mod, inp, out):
        if not mod.training or p == 0:
            return out
        if isinstance(out, tuple):
            return (F.dropout(out[0], p, True),) + tuple(out[1:])
        return F.dropout(out, p, True)
    inner = model.model
    handles = [inner.embed_tokens.register_forward_hook(hook)]
    for layer in inner.layers:
        handles.append(layer.self_attn.register_forward_hook(hook))
        handles.append(layer.mlp.register_forward_hook(hook))
    return handles


def autocast(dev, amp=True):
    return torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                          enabled=amp and dev.type == "cuda")


def evaluate(model, ids, seq, dev, amp=True, batch=64):
    """Mean cross-entropy (nats) per token over every token of ids after
    the first, each predicted once, in non-overlapping windows of seq
    tokens (the last one shorter). amp: BF16 autocast on a GPU."""
    model.eval()
    total, count = 0.0, 0
    starts = list(range(0, len(ids) - 1, seq))
    with torch.no_grad(), autocast(dev, amp):
        for i in range(0, len(starts), batch):
            group = starts[i:i + batch]
            full = [s for s in group if s + seq + 1 <= len(ids)]
            parts = []
            if full:
                idx = torch.tensor(full)[:, None] + torch.arange(seq + 1)[None, :]
                parts.append(ids[idx])
            if len(full) < len(group):  # the short last window
                parts.append(ids[group[-1]:].view(1, -1))
            for chunk in parts:
                chunk = chunk.to(dev)
                logits = model(input_ids=chunk[:, :-1], use_cache=False).logits.float()
                y = chunk[:, 1:]
                total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                         reduction="sum").item()
                count += y.numel()
    model.train()
    assert count == len(ids) - 1, (count, len(ids))
    return total / count


def unigram_loss(train_ids, val_ids, vocab):
    """Cross-entropy of val_ids[1:] under the training split's token
    frequencies with add-one smoothing: the baseline of evaluate()."""
    counts = torch.bincount(train_ids, minlength=vocab).double() + 1.0
    logp = torch.log(counts / counts.sum())
    return float(-logp[val_ids[1:]].mean())


def train_run(cfg, a, epochs, dropout, train_ids, dev_ids, dev, deadline):
    """One run of the grid: returns (best dev loss, its state dict on the
    CPU, a summary dict)."""
    torch.manual_seed(a.seed)
    model = transformers.AutoModelForCausalLM.from_config(
        cfg, dtype=torch.float32, attn_implementation=a.attn).to(dev)
    model.train()
    handles = add_dropout(model, dropout)
    tokens_per_step = a.batch * a.seq
    steps = a.steps or max(1, round(epochs * len(train_ids) / tokens_per_step))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    warmup = min(a.warmup, steps // 10 + 1)

    def lr_at(step):
        if step < warmup:
            return a.lr * (step + 1) / warmup
        t = (step - warmup) / max(1, steps - warmup)
        return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))

    g = torch.Generator().manual_seed(a.seed)
    eval_every = a.eval_every or max(1, steps // 24)
    best, best_state, best_step = float("inf"), None, -1
    t0 = time.time()
    t_timed, step_timed = None, 0
    curve = []
    stopped = None
    done = 0
    log(f"run epochs={epochs} dropout={dropout}: {steps} steps of {tokens_per_step} tokens, "
        f"warmup {warmup}, eval every {eval_every}")
    for step in range(steps):
        if time.time() > deadline:
            stopped = f"time guard at step {step} of {steps}"
            log(f"  stopping: {stopped}")
            break
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step)
        starts = torch.randint(0, len(train_ids) - a.seq - 1, (a.batch,), generator=g)
        idx = starts[:, None] + torch.arange(a.seq + 1)[None, :]
        chunk = train_ids[idx].to(dev, non_blocking=True)
        x, y = chunk[:, :-1], chunk[:, 1:]
        with autocast(dev):
            logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done = step + 1
        if step == 4:  # the first steps include start-up costs
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t_timed, step_timed = time.time(), step
        if step == 24 and t_timed is not None:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            sps = (time.time() - t_timed) / (step - step_timed)
            log(f"  {tokens_per_step / sps:,.0f} tokens/s ({sps * 1000:.1f} ms/step), "
                f"this run about {sps * steps:.0f} s")
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            d = evaluate(model, dev_ids, a.seq, dev)
            curve.append([step + 1, round(loss.item(), 4), round(d, 4)])
            mark = ""
            if d < best:
                best, best_step, mark = d, step + 1, " *"
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            log(f"  step {step + 1:5d}  lr {lr_at(step):.2e}  train {loss.item():.4f}  "
                f"dev {d:.4f}{mark}  ({time.time() - t0:.0f} s)")
    if best_state is None and done > 0:  # cut before the first evaluation
        best = evaluate(model, dev_ids, a.seq, dev)
        best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        best_step = done
    for h in handles:
        h.remove()
    secs = time.time() - t0
    summary = {"epochs": epochs, "dropout": dropout, "steps_planned": steps, "steps_run": done,
               "best_dev_loss": best, "best_step": best_step, "seconds": round(secs, 1), "tokens_per_step": tokens_per_step,
               "stopped": stopped, "curve": curve}
    del model, opt
    return best, best_state, summary


# ---------------------------------------------------------------- golden

def write_golden(model_dir, out, fast, val_docs, seed):
    """Reference logits and a greedy continuation for the shipped weights."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager")
    ref = to_reference(model, rope_buffers(model))
    V = ref.config.vocab_size
    enc = lambda s: fast(s, add_special_tokens=False)["input_ids"]
    g = torch.Generator().manual_seed(7)
    seqs = [enc("The"), enc(PROMPT), enc(val_docs[0])[:64],
            [int(x) for x in torch.randint(0, V, (40,), generator=g)]]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cases = []
    with torch.no_grad():
        for i, ids in enumerate(seqs):
            logits = ref(torch.tensor([ids]), use_cache=False).logits[0]
            fn = f"logits-{i}.bin"
            with open(os.path.join(out, fn), "wb") as f:
                f.write(logits.to(torch.float32).numpy().astype("<f4").tobytes())
            cases.append({"ids": ids, "logits": fn, "shape": list(logits.shape)})
    chosen = None
    for text in GOLDEN_PROMPTS + [d.split("\n")[0][:40] for d in val_docs[1:9]]:
        prompt = enc(text)
        toks, margin = greedy(ref, prompt, N_GREEDY)
        log(f"golden prompt {text!r}: " + (f"min margin {margin:.3g}" if toks else
                                            f"near-tie (margin {margin:.3g}), next"))
        if toks:
            chosen = {"prompt_text": text, "prompt": prompt, "tokens": toks,
                      "text": fast.decode(toks), "min_margin": margin,
                      "min_margin_first16_vs_std": MIN_MARGIN_16}
            break
    if chosen is None:
        raise RuntimeError("every golden prompt has a near-tie in its greedy continuation")
    exp = {
        "model_dir": "models/default",
        "family": "qwen3", "seed": seed, "weights_dtype": "bfloat16",
        "transformers": transformers.__version__, "torch": torch.__version__,
        "reference": "float64 forward pass on the CPU, eager attention, of the shipped "
                     "BF16 weights",
        "cases": cases, "greedy": chosen,
    }
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1, ensure_ascii=False)
    return chosen


# ---------------------------------------------------------------- samples

def sample(model, fast, prompt, dev, greedy_only, seed, n=48, eos=None):
    """Text after prompt: greedy, or sampled with GEN_DEFAULTS (HF
    semantics of each knob), stopping at eos."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = fast(prompt, add_special_tokens=False)["input_ids"]
    out = []
    model.eval()
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids + out], device=dev),
                           use_cache=False).logits[0, -1].float().cpu()
            if greedy_only:
                nxt = int(logits.argmax())
            else:
                rp = GEN_DEFAULTS["repetition_penalty"]
                seen = torch.tensor(sorted(set(ids + out)))
                v = logits[seen]
                logits[seen] = torch.where(v > 0, v / rp, v * rp)
                logits = logits / GEN_DEFAULTS["temperature"]
                kth = torch.topk(logits, GEN_DEFAULTS["top_k"]).values[-1]
                logits[logits < kth] = -float("inf")
                probs = torch.softmax(logits, -1)
                sp, si = torch.sort(probs, descending=True)
                cut = torch.cumsum(sp, 0) - sp >= GEN_DEFAULTS["top_p"]
                sp[cut] = 0
                nxt = int(si[torch.multinomial(sp / sp.sum(), 1, generator=g)])
            if nxt == eos:
                break
            out.append(nxt)
    return fast.decode(out)


# ---------------------------------------------------------------- card

def model_card(m):
    a = m["arch"]
    return f"""# Atlas default model

A small Qwen3-architecture language model trained from scratch on Debian's
fortune cookie collection, shipped with Atlas so that `atlas-run` works
with no `-m` on a fresh machine, and used as a golden test fixture
(`tests/fixtures/golden/default`). Intended use: demos and tests. It
writes short fortune-cookie-style English; it knows no facts and follows
no instructions, and its sayings, like the corpus, are jokes and quotations
that may be dated or rude.

## Architecture

`Qwen3ForCausalLM`: {a['layers']} layers, hidden size {a['hidden']}, {a['heads']} attention
heads and {a['kv_heads']} key/value heads of dimension {a['head_dim']}, SwiGLU MLP of
{a['intermediate']}, q/k RMSNorm, RoPE (theta {a['rope_theta']:g}), tied input/output
embeddings, context {a['max_position']} tokens. {m['params']:,} parameters
({m['params_non_embedding']:,} outside the embeddings), stored in BF16
({m['model_bytes'] / 1e6:.1f} MB in all).

Tokenizer: byte-level BPE, {m['vocab']} tokens ({m['vocab'] - 3} learned on the training split
plus `<|endoftext|>` (id {m['eos']}, also end of a fortune), `<|im_start|>`, `<|im_end|>`),
Qwen2 pre-tokenizer regex, no normalizer; ChatML chat template.

## Data

The English fortune files of the Debian 12 packages `fortunes-min` and
`fortunes` (source package fortune-mod 1:1.99.1-7.3), built by
`scripts/make-corpus.sh`: {m['corpus_docs']:,} distinct fortunes, {m['corpus_bytes'] / 1e6:.2f} MB
(ascii-art left out). License: the packages' copyright file gives the BSD
license of the University of California (1991) for fortune-mod and its
data; the cookies themselves are quotations and jokes collected from many
authors over decades.

Split by a hash of each fortune's text: {m['split']['train_docs']:,} training fortunes
({m['split']['train_tokens']:,} tokens), {m['split']['dev_docs']:,} dev fortunes (checkpoint
selection), {m['split']['val_docs']:,} validation fortunes ({m['split']['val_tokens']:,} tokens,
{m['split']['val_bytes']:,} bytes), used only for the numbers below.

## Training

`scripts/train-default.py --seed {m['seed']}` on {m['device_name']}, {m['train_seconds']:.0f} s
in all: AdamW (betas 0.9/0.99, weight decay {m['hparams']['weight_decay']} on matrices), peak learning
rate {m['hparams']['lr']:g}, warm-up then cosine decay to {m['hparams']['min_lr_frac']:g}x, batches of
{m['hparams']['batch']} x {m['hparams']['seq']} tokens, BF16 autocast, gradient clipping at 1.
{len(m['grid'])} runs of different length and dropout; the one with the best dev loss
was kept: {m['chosen']['epochs']} epochs planned, dropout {m['chosen']['dropout']}, weights of step
{m['chosen']['best_step']} ({m['chosen']['best_step'] * m['hparams']['batch'] * m['hparams']['seq']:,} tokens seen).

## Quality

Cross-entropy per token on the held-out validation split, in nats (the
shipped BF16 weights, FP32 arithmetic):

| model | nats/token | bits/byte |
|---|---|---|
| this model | {m['val_loss']:.3f} | {m['val_bits_per_byte']:.3f} |
| unigram baseline (training-split token frequencies, add-one) | {m['unigram_loss']:.3f} | {m['unigram_bits_per_byte']:.3f} |

Greedy continuation of "{PROMPT}" (transformers, 48 tokens at most):

```
{PROMPT}{m['samples']['greedy']}
```

## Reproducing

```sh
sh scripts/make-corpus.sh
python3 scripts/train-default.py OUTDIR   # or sh scripts/gpu-train-default.sh OUTDIR
```

transformers {m['versions']['transformers']}, tokenizers {m['versions']['tokenizers']}, torch {m['versions']['torch']}.
"""


# ---------------------------------------------------------------- main

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("outdir")
    p.add_argument("--corpus", default=".corpus/fortunes.txt")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--intermediate", type=int, default=1024)
    p.add_argument("--max-position", type=int, default=1024)
    p.add_argument("--rope-theta", type=float, default=1e6)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grid", default="12:0.1,24:0.15,48:0.25",
                   help="runs as EPOCHS:DROPOUT,...; the best dev loss is shipped")
    p.add_argument("--steps", type=int, default=0, help="fixed steps per run (overrides epochs)")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--val-frac", type=float, default=0.05)
    p.add_argument("--dev-frac", type=float, default=0.02)
    p.add_argument("--max-minutes", type=float, default=7.0,
                   help="training time guard over all runs; saving follows")
    p.add_argument("--attn", default="sdpa", help="attention implementation for training")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--no-golden", action="store_true")
    return p.parse_args()


def main():
    a = parse_args()
    t_start = time.time()
    deadline = t_start + 60 * a.max_minutes
    dev = torch.device(a.device)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    import tokenizers
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]}
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    log(f"versions {versions}, device {device_name}")

    docs, corpus_bytes = read_corpus(a.corpus)
    parts = {"train": [], "dev": [], "val": []}
    for d in docs:
        parts[split_of(d, a.val_frac, a.dev_frac)].append(d)
    log(f"corpus {a.corpus}: {len(docs)} fortunes, {corpus_bytes} bytes; train "
        f"{len(parts['train'])}, dev {len(parts['dev'])}, val {len(parts['val'])}")

    os.makedirs(a.outdir, exist_ok=True)
    model_dir = os.path.join(a.outdir, "model")
    shutil.rmtree(model_dir, ignore_errors=True)
    tok, fast = train_tokenizer(parts["train"], a.vocab, model_dir)
    V = tok.get_vocab_size()
    eos = tok.token_to_id("<|endoftext|>")
    assert V == a.vocab and eos is not None, (V, eos)
    ids = {k: stream(tok, v, eos) for k, v in parts.items()}
    for k, v in ids.items():
        log(f"{k}: {len(v)} tokens")
    val_bytes = sum(len(d.encode("utf-8")) + 1 for d in parts["val"])  # + the separator

    cfg = make_config(V, eos, a)
    probe = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    n_params = sum(p.numel() for p in probe.parameters())  # the tied matrix once
    del probe
    est = 2 * n_params + os.path.getsize(os.path.join(model_dir, "tokenizer.json")) + 20_000
    log(f"model: {n_params:,} parameters, about {est / 1e6:.1f} MB in BF16 with the tokenizer")
    if est > MAX_BYTES:
        sys.exit(f"train-default: the model would take {est} bytes, over {MAX_BYTES}")

    grid = [(float(e), float(p)) for e, p in (x.split(":") for x in a.grid.split(","))]
    results, best = [], (float("inf"), None, None)
    for i, (epochs, drop) in enumerate(grid):
        if time.time() > deadline:
            log(f"skipping run epochs={epochs} dropout={drop}: time guard")
            results.append({"epochs": epochs, "dropout": drop, "skipped": "time guard"})
            continue
        loss, state, summary = train_run(cfg, a, epochs, drop, ids["train"], ids["dev"], dev,
                                         deadline)
        results.append(summary)
        if state is not None and loss < best[0]:
            best = (loss, state, summary)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if best[1] is None:
        sys.exit("train-default: no run finished a step")
    train_seconds = time.time() - t_start
    chosen = best[2]
    log(f"chosen: epochs={chosen['epochs']} dropout={chosen['dropout']}, dev loss "
        f"{chosen['best_dev_loss']:.4f} at step {chosen['best_step']}")

    # save the chosen weights in BF16
    torch.manual_seed(a.seed)
    model = transformers.AutoModelForCausalLM.from_config(
        cfg, dtype=torch.float32, attn_implementation="eager")
    model.load_state_dict(best[1])
    model = model.to(torch.bfloat16)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=None, eos_token_id=eos, **GEN_DEFAULTS)
    model.save_pretrained(model_dir)
    del model
    model_bytes = sum(os.path.getsize(os.path.join(model_dir, f)) for f in os.listdir(model_dir))
    log(f"saved {model_dir}: {sorted(os.listdir(model_dir))}, {model_bytes} bytes")

    # measure what ships: reload the BF16 checkpoint, FP32 arithmetic
    shipped = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation=a.attn).to(dev)
    val_loss = evaluate(shipped, ids["val"], a.seq, dev, amp=False)
    uni = unigram_loss(ids["train"], ids["val"], V)
    ntok = len(ids["val"]) - 1
    bpb = lambda nats: nats * ntok / val_bytes / math.log(2)
    log(f"held-out: {val_loss:.4f} nats/token ({bpb(val_loss):.3f} bits/byte); unigram "
        f"{uni:.4f} nats/token ({bpb(uni):.3f} bits/byte); {ntok} tokens")

    samples = {"prompt": PROMPT,
               "greedy": sample(shipped, fast, PROMPT, dev, True, a.seed, eos=eos)}
    for k in range(3):
        samples[f"sampled_seed{k + 1}"] = sample(shipped, fast, PROMPT, dev, False, k + 1, eos=eos)
    del shipped

    m = {
        "seed": a.seed, "versions": versions, "device_name": device_name,
        "arch": {k: getattr(a, k) for k in ("hidden", "layers", "heads", "kv_heads", "head_dim",
                                            "intermediate", "max_position", "rope_theta")},
        "params": n_params, "params_non_embedding": n_params - V * a.hidden,
        "vocab": V, "eos": eos, "model_bytes": model_bytes,
        "corpus_docs": len(docs), "corpus_bytes": corpus_bytes,
        "split": {"train_docs": len(parts["train"]), "dev_docs": len(parts["dev"]),
                  "val_docs": len(parts["val"]), "train_tokens": len(ids["train"]),
                  "dev_tokens": len(ids["dev"]), "val_tokens": ntok, "val_bytes": val_bytes},
        "hparams": {k: getattr(a, k) for k in ("batch", "seq", "lr", "min_lr_frac", "warmup",
                                               "weight_decay", "val_frac", "dev_frac")},
        "grid": results, "chosen": {k: v for k, v in chosen.items() if k != "curve"},
        "train_seconds": train_seconds,
        "val_loss": val_loss, "val_bits_per_byte": bpb(val_loss),
        "unigram_loss": uni, "unigram_bits_per_byte": bpb(uni),
        "samples": samples,
    }
    with open(os.path.join(model_dir, "README.md"), "w") as f:
        f.write(model_card(m))

    if not a.no_golden:
        try:
            m["golden"] = write_golden(model_dir, os.path.join(a.outdir, "golden-default"),
                                       fast, parts["val"], a.seed)
            log(f"golden: prompt {m['golden']['prompt_text']!r} -> {m['golden']['text']!r}")
        except Exception as e:  # the model is saved; report and go on
            import traceback
            traceback.print_exc()
            m["golden_error"] = repr(e)
    m["total_seconds"] = time.time() - t_start
    with open(os.path.join(a.outdir, "train.json"), "w") as f:
        json.dump(m, f, indent=1, ensure_ascii=False)
    log("samples for " + repr(PROMPT) + ":")
    for k, v in samples.items():
        if k != "prompt":
            log(f"  [{k}] {PROMPT}{v}")
    total = sum(os.path.getsize(os.path.join(model_dir, f)) for f in os.listdir(model_dir))
    log(f"done in {m['total_seconds']:.0f} s; model directory {total} bytes"
        + ("" if total <= MAX_BYTES else f" OVER THE {MAX_BYTES}-BYTE LIMIT"))


if __name__ == "__main__":
    main()
