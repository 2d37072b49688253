#!/usr/bin/env python3
"""gen-chat-fixtures.py - expected chat-template renders from transformers.

Usage: python3 scripts/gen-chat-fixtures.py FIXDIR OUTDIR [--emulate]

FIXDIR (tests/fixtures/chat) holds conversations.json and one directory
per model with tokenizer_config.json (chat_template, bos_token,
eos_token) and tokenizer.json. For every model and conversation this
renders the request through transformers' apply_chat_template
(tokenize=False) and writes OUTDIR/<model>/expected.json:

  {"generator": ..., "renders": [{"name": N, "text": T} |
                                 {"name": N, "error": MSG, "raised": B}]}

"raised" is true when the template itself called raise_exception (the
message must then match), false for any other failure (only the failure
must match). The request's keys other than "messages", "tools" and
"add_generation_prompt" are passed as extra template variables, as
atlas_chat_render does.

--emulate (or no transformers installed) renders with plain jinja2 set up
the way transformers sets it up; the output says so in "generator". The
ground truth is the run with transformers; it needs no network.
"""
import json
import os
import sys


def load_fixtures(fixdir):
    convs = json.load(open(os.path.join(fixdir, "conversations.json"), encoding="utf-8"))
    models = sorted(d for d in os.listdir(fixdir)
                    if os.path.isfile(os.path.join(fixdir, d, "tokenizer_config.json")))
    return convs["conversations"], models


def split_request(req):
    req = dict(req)
    messages = req.pop("messages")
    tools = req.pop("tools", None)
    gen = req.pop("add_generation_prompt", True)
    return messages, tools, gen, req


def make_transformers_renderer(model_dir, cfg):
    import transformers
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(model_dir, "tokenizer.json"),
                                  bos_token=cfg.get("bos_token"), eos_token=cfg.get("eos_token"))
    tok.chat_template = cfg["chat_template"]

    def render(req):
        messages, tools, gen, extra = split_request(req)
        return tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen,
                                       tokenize=False, **extra)
    return render, "transformers " + transformers.__version__


def make_emulated_renderer(model_dir, cfg):
    """jinja2 configured as transformers' chat_template_utils does."""
    import datetime
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    tmpl = env.from_string(cfg["chat_template"])
    special = {k: cfg[k] for k in ("bos_token", "eos_token") if cfg.get(k) is not None}

    def render(req):
        messages, tools, gen, extra = split_request(req)
        return tmpl.render(messages=messages, tools=tools, documents=None,
                           add_generation_prompt=gen, **special, **extra)
    return render, "jinja2 " + jinja2.__version__ + " (emulating transformers)"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        sys.exit(__doc__)
    fixdir, outdir = args
    emulate = "--emulate" in sys.argv
    if not emulate:
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("transformers not installed: emulating with jinja2", file=sys.stderr)
            emulate = True
    import jinja2
    convs, models = load_fixtures(fixdir)
    for model in models:
        model_dir = os.path.join(fixdir, model)
        cfg = json.load(open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8"))
        maker = make_emulated_renderer if emulate else make_transformers_renderer
        render, generator = maker(model_dir, cfg)
        renders = []
        for c in convs:
            try:
                renders.append({"name": c["name"], "text": render(c["request"])})
            except Exception as e:  # the failure itself is the expected result
                raised = type(e) is jinja2.exceptions.TemplateError
                renders.append({"name": c["name"], "error": str(e), "raised": raised})
        os.makedirs(os.path.join(outdir, model), exist_ok=True)
        with open(os.path.join(outdir, model, "expected.json"), "w", encoding="utf-8") as f:
            json.dump({"generator": generator, "renders": renders}, f, ensure_ascii=False,
                      indent=1)
            f.write("\n")
        nerr = sum(1 for r in renders if "error" in r)
        print(f"{model}: {len(renders)} renders ({nerr} errors) with {generator}")


if __name__ == "__main__":
    main()
