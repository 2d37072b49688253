#!/usr/bin/env python3
"""gen-moe-golden.py - build the mixture-of-experts golden fixtures.

Run on a machine with PyTorch and transformers (5.x); no network and no
GPU needed (everything is computed on the CPU):

    python3 scripts/gen-moe-golden.py OUTDIR

It writes only OUTDIR/golden/<name>/ for the MoE cases below, in the
format of scripts/gen-golden.py (config.json, generation_config.json,
model.safetensors, the tokenizer files of tests/fixtures/golden/tokenizer,
expected.json + logits-*.bin, greedy continuation with the near-tie
redraw rule). The tokenizer is not retrained: it is copied from the
repository (tests/fixtures/golden/tokenizer, else models/default), so the
token sequences are the ones the dense goldens use.

On top of the logit near-tie rule, a seed is redrawn when any router
decision is close to a tie (the k-th and (k+1)-th router logits of a token
closer than MIN_ROUTER_GAP), so that FP32 rounding cannot swap an expert.

Each model is built in its own try/except: a failure is printed and the
next model is tried. The tensor names and shapes written to each
model.safetensors are printed, so the loader's expectations can be checked
against what this transformers version writes (transformers 5 may keep the
experts fused as 3-D tensors).
"""
import json
import os
import shutil
import sys
import traceback

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_ref import (MIN_MARGIN_16, N_GREEDY, find_tokenizer, greedy,  # noqa: E402
                        rope_buffers, to_reference, tokenizer_vocab, write_logits)

MAX_SEEDS = 60
MIN_ROUTER_GAP = 1e-3  # smallest gap between the k-th and (k+1)-th router logit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_class(family):
    names = {
        "qwen3_moe": ("Qwen3MoeConfig",),
        "qwen2_moe": ("Qwen2MoeConfig",),
        "mixtral": ("MixtralConfig",),
    }[family]
    for n in names:
        if hasattr(transformers, n):
            return getattr(transformers, n)
    return transformers.AutoConfig.for_model(family).__class__


# Alternative spellings of a config kwarg, tried when the first is refused.
ALIASES = {
    "num_experts": ("num_experts", "num_local_experts", "n_routed_experts"),
    "num_local_experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "num_experts_per_tok": ("num_experts_per_tok", "top_k", "num_experts_per_token"),
    "moe_intermediate_size": ("moe_intermediate_size", "expert_intermediate_size"),
    "shared_expert_intermediate_size": ("shared_expert_intermediate_size",),
}


def build_config(family, **kw):
    """The config object; kwargs whose name this transformers refuses are
    retried under their alternative spellings. Also checks afterwards that
    each MoE value reads back under some spelling."""
    cls = config_class(family)
    theta = kw.pop("rope_theta", 10000.0)
    rope = {"rope_type": "default", "rope_theta": theta}
    kw = dict(kw)
    for attempt in range(8):
        try:
            try:
                cfg = cls(rope_parameters=rope, **kw)
            except TypeError as e:
                if "rope_parameters" not in str(e):
                    raise
                cfg = cls(rope_theta=theta, **kw)  # a transformers 4.x install
            break
        except TypeError as e:
            msg = str(e)
            bad = [k for k in kw if f"'{k}'" in msg]
            if not bad:
                raise
            k = bad[0]
            alts = [a for a in ALIASES.get(k, ()) if a != k and a not in kw]
            if not alts:
                print(f"  {family}: dropping refused kwarg {k}={kw[k]!r}", flush=True)
                kw.pop(k)
            else:
                print(f"  {family}: kwarg {k} refused, trying {alts[0]}", flush=True)
                kw[alts[0]] = kw.pop(k)
    for k, v in kw.items():
        if k in ALIASES and not any(getattr(cfg, a, None) == v for a in ALIASES[k]):
            print(f"  {family}: warning: {k}={v!r} does not read back from the config",
                  flush=True)
    return cfg


def build_model(cfg, dtype):
    """The model with eager attention and, where transformers 5 offers a
    choice, the eager (per-expert loop) experts implementation: the others
    may not take float64 on the CPU."""
    for extra in ({"experts_implementation": "eager"}, {}):
        try:
            return transformers.AutoModelForCausalLM.from_config(
                cfg, dtype=dtype, attn_implementation="eager", **extra)
        except (TypeError, ValueError) as e:
            if not extra:
                raise
            print(f"  experts_implementation=eager not accepted ({e}); using the default",
                  flush=True)
    raise AssertionError("unreachable")


def init_weights(model, seed):
    """As gen-golden.py's init_weights; the fan-in of a 3-D (fused
    experts) tensor is its last dimension as well."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                rows = torch.exp(0.7 * torch.randn((p.shape[0], 1), generator=g))
                scale = 1.0 if "embed_tokens" in name else 1.0 / p.shape[-1] ** 0.5
                p.copy_(torch.randn(p.shape, generator=g) * rows * scale)
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)


class RouterWatch:
    """Forward hooks on every router (a module named '...gate' with a 2-D
    weight [n_experts, hidden]) that record the smallest gap between the
    k-th and (k+1)-th router logit seen, computed in float64 from the
    router's input."""

    def __init__(self, model, k):
        self.k = k
        self.min_gap = float("inf")
        self.calls = 0
        self.handles = []
        self.n_experts = set()
        for name, mod in model.named_modules():
            w = getattr(mod, "weight", None)
            if name.endswith((".gate", ".router")) and isinstance(w, torch.Tensor) \
                    and w.dim() == 2 and w.shape[0] > 1:
                try:
                    h = mod.register_forward_hook(self.hook, with_kwargs=True)
                except TypeError:  # an older torch: positional arguments only
                    h = mod.register_forward_hook(
                        lambda m, a, o: self.hook(m, a, {}, o))
                self.handles.append(h)
                self.n_experts.add(int(w.shape[0]))

    def hook(self, mod, args, kwargs, out):
        x = args[0] if args else kwargs.get("hidden_states")
        if not isinstance(x, torch.Tensor):
            x = next((v for v in kwargs.values() if isinstance(v, torch.Tensor)), None)
        if not isinstance(x, torch.Tensor):
            return
        x = x.reshape(-1, x.shape[-1]).to(torch.float64)
        logits = x @ mod.weight.detach().to(torch.float64).T
        top = torch.sort(logits, dim=-1, descending=True).values
        if top.shape[-1] > self.k:
            gap = float((top[:, self.k - 1] - top[:, self.k]).min())
            self.min_gap = min(self.min_gap, gap)
        self.calls += 1

    def close(self):
        for h in self.handles:
            h.remove()


def reference_logits(ref, seqs):
    out = []
    with torch.no_grad():
        for ids in seqs:
            out.append(ref(torch.tensor([ids]), use_cache=False).logits[0])
    return out


def print_tensors(d):
    from safetensors import safe_open
    fn = os.path.join(d, "model.safetensors")
    if not os.path.exists(fn):
        print(f"  {d}: no model.safetensors (sharded?): {sorted(os.listdir(d))}", flush=True)
        return
    with safe_open(fn, framework="pt") as f:
        for k in sorted(f.keys()):
            try:
                t = f.get_slice(k)
                shape, dt = list(t.get_shape()), t.get_dtype()
            except Exception:  # an older safetensors
                t = f.get_tensor(k)
                shape, dt = list(t.shape), str(t.dtype)
            print(f"  tensor {k} {shape} {dt}", flush=True)


def write_case(name, family, out, tok_dir, seed, wdtype, seqs, top_k, n_experts, **cfg_kw):
    for attempt in range(MAX_SEEDS):
        s = seed + 1000 * attempt
        torch.manual_seed(s)
        cfg = build_config(family, **dict(cfg_kw))
        model = build_model(cfg, torch.float32)
        init_weights(model, s)
        saved = rope_buffers(model)
        model = model.to(wdtype)
        ref = to_reference(model, saved)  # the reference from the stored (rounded) values
        watch = RouterWatch(ref, top_k)
        prompt = seqs[-1][:8]
        toks, margin = greedy(ref, prompt, N_GREEDY)
        logits = reference_logits(ref, seqs) if toks is not None else None
        watch.close()
        if watch.calls == 0:
            print(f"  {name}: warning: no router call seen (modules: "
                  f"{sorted({type(m).__name__ for m in ref.modules()})}); "
                  f"router near-ties not checked", flush=True)
        if watch.n_experts and watch.n_experts != {n_experts}:
            raise RuntimeError(f"{name}: routers have {sorted(watch.n_experts)} experts, "
                               f"wanted {n_experts}: a config kwarg was not taken")
        if toks is not None and watch.min_gap >= MIN_ROUTER_GAP:
            break
        print(f"  {name}: seed {s} redrawn (greedy margin {margin:.3g}, "
              f"router gap {watch.min_gap:.3g})", flush=True)
    else:
        raise RuntimeError(f"{name}: no seed without near-ties")
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    model = model.to(wdtype)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id)
    model.save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, f), d)
    cases = write_logits(d, seqs, logits)
    # The saved checkpoint must give the same reference when reloaded.
    try:
        try:
            back = transformers.AutoModelForCausalLM.from_pretrained(
                d, dtype=torch.float64, experts_implementation="eager")
        except (TypeError, ValueError):
            back = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64)
        back = to_reference(back, saved)
        with torch.no_grad():
            x = torch.tensor([seqs[-1]])
            diff = (back(x, use_cache=False).logits[0] - logits[-1]).abs().max().item()
        print(f"  {name}: reloaded checkpoint differs from the reference by {diff:.3g}",
              flush=True)
    except Exception as e:  # the fixture is written; only the check failed
        print(f"  {name}: warning: reload check failed: {e!r}", flush=True)
    exp = {
        "family": family, "seed": s, "weights_dtype": str(wdtype).replace("torch.", ""),
        "transformers": transformers.__version__, "torch": torch.__version__,
        "reference": "float64 forward pass on the CPU, eager attention",
        "min_router_gap": watch.min_gap,
        "cases": cases,
        "greedy": {"prompt": prompt, "tokens": toks, "min_margin": margin,
                   "min_margin_first16_vs_std": MIN_MARGIN_16},
    }
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
    print(f"{name}: {sum(p.numel() for p in model.parameters())} params, seed {s} "
          f"(attempt {attempt + 1}), greedy margin {margin:.3g}, "
          f"router gap {watch.min_gap:.3g}", flush=True)
    with open(os.path.join(d, "config.json")) as f:
        print(f"  {name} config.json: {f.read()}", flush=True)
    print_tensors(d)
    return d


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "out"
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    tok_dir = find_tokenizer(REPO)
    V, eos = tokenizer_vocab(tok_dir)

    # the same sequences as gen-golden.py draws
    g = torch.Generator().manual_seed(7)
    seqs = [
        [int(x) for x in torch.randint(0, V, (1,), generator=g)],
        [int(x) for x in torch.randint(0, V, (7,), generator=g)],
        [int(x) for x in torch.randint(0, V, (40,), generator=g)],
    ]
    gold = os.path.join(out, "golden")
    os.makedirs(gold, exist_ok=True)
    common = dict(vocab_size=V, bos_token_id=None, eos_token_id=eos, rms_norm_eps=1e-6,
                  hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512)
    cases = [
        # 3 layers, layer 1 dense (mlp_only_layers): dense and MoE mixed
        ("qwen3-moe", "qwen3_moe", 21, torch.float32, 2, dict(
            num_hidden_layers=3, head_dim=32, intermediate_size=96,
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
            tie_word_embeddings=False, rope_theta=1000000.0, **common)),
        # no renormalisation of the top-k weights, all layers MoE, BF16 weights
        ("qwen3-moe-nonorm", "qwen3_moe", 22, torch.bfloat16, 2, dict(
            num_hidden_layers=2, head_dim=16, intermediate_size=96,
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
            tie_word_embeddings=True, rope_theta=1000000.0, **common)),
        # shared expert with its sigmoid gate, QKV bias
        ("qwen2-moe", "qwen2_moe", 23, torch.float32, 2, dict(
            num_hidden_layers=2, intermediate_size=96,
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=48, norm_topk_prob=False,
            decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False,
            tie_word_embeddings=False, rope_theta=1000000.0, **common)),
        # Mixtral: intermediate_size is each expert's size
        ("mixtral", "mixtral", 24, torch.float32, 2, dict(
            num_hidden_layers=2, intermediate_size=32,
            num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
            tie_word_embeddings=False, rope_theta=1000000.0, **common)),
    ]
    only = set(sys.argv[2:])
    failed = []
    for name, family, seed, wdtype, k, kw in cases:
        n_experts = kw.get("num_experts", kw.get("num_local_experts"))
        if only and name not in only:
            continue
        try:
            write_case(name, family, gold, tok_dir, seed, wdtype, seqs, k, n_experts, **kw)
        except Exception:  # keep going: report and try the next model
            traceback.print_exc()
            print(f"FAILED {name}", flush=True)
            failed.append(name)
    print("done" + (f", failed: {' '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
