#!/bin/sh
# gpu-golden.sh - run on the GPU machine (which has PyTorch and
# transformers) to regenerate the golden fixtures and the default model:
#     sh scripts/gpu-golden.sh OUTDIR
# then unpack OUTDIR/golden.tar.gz here with scripts/install-golden.sh.
set -e
out=${1:?usage: gpu-golden.sh OUTDIR}
python3 -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)'
PYTHONUNBUFFERED=1 python3 scripts/gen-golden.py "$out/gen" 2>&1 | tee "$out/gen.log"
tar -C "$out/gen" -czf "$out/golden.tar.gz" .
du -sh "$out/gen"/* 
