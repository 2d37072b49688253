#!/bin/sh
# gpu-train-default.sh - run on the GPU machine (PyTorch, transformers,
# tokenizers; no network) to train the default model:
#     sh scripts/gpu-train-default.sh OUT [train-default.py options]
# Needs .corpus/fortunes.txt (sh scripts/make-corpus.sh, carried along).
# Training stops after 7 minutes at most; the whole run fits in a
# 10-minute call. Leaves three files in OUT: default.tgz (model/ for
# models/default, golden-default/ for tests/fixtures/golden/default,
# train.json), train.log and train.json.
set -u
out=${1:?usage: gpu-train-default.sh OUT [train-default.py options]}
shift
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$src"
python3 -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tee "$out/train.log"
ls -l .corpus/fortunes.txt 2>&1 | tee -a "$out/train.log"
PYTHONUNBUFFERED=1 timeout 560 python3 scripts/train-default.py --max-minutes 7 "$@" "$work" >>"$out/train.log" 2>&1
status=$?
echo "train-default.py exit status $status" >>"$out/train.log"
[ -f "$work/train.json" ] && cp "$work/train.json" "$out/train.json"
cp "$out/train.log" "$work/train.log"
(cd "$work" && tar -czf "$out/default.tgz" $(ls -d model golden-default train.json train.log 2>/dev/null))
tail -25 "$out/train.log"
ls -l "$out" "$work/model" "$work/golden-default" 2>&1
rm -rf "$work"
exit $status
