#!/bin/sh
# cpu-roofline.sh - CPU decode/prefill speed of atlas-run on a synthetic
# Qwen3-0.6B-shape model and on the largest golden model, with the host's
# copy bandwidth measured in the same run, and the resulting fraction of
# the decode roofline (weight bytes per token / bandwidth).
#
#   sh scripts/cpu-roofline.sh [OUTFILE]      (run from the repo root after make)
set -e
out=${1:-/dev/stdout}
syn=${SYNTH_DIR:-/tmp/atlas-qwen3-0.6b}
[ -f "$syn/model.safetensors" ] || python3 scripts/make-synthetic.py qwen3-0.6b "$syn" >&2
cc -O2 -pthread -o build/membw scripts/membw.c
prompt=$(printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 12))
bw1=$(build/membw 1024 1)
bwn=$(build/membw 1024)
run() { # model -> "prompt_toks prompt_tps gen_toks gen_tps weight_bytes"
	build/atlas-run -m "$1" -p "$prompt" -n 64 --ignore-eos -v 2>&1 >/dev/null |
	awk '/weights read per token/ { for (i = 1; i <= NF; i++) if ($i == "bytes") wb = $(i-1) }
	     /^atlas-run: prompt/ { gsub(/[();]/, ""); print $3, $8, $11, $16, wb }'
}
{
	echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	echo "copy bandwidth (read+write): 1 thread $bw1 GB/s, all threads $bwn GB/s"
	for m in "$syn" tests/fixtures/golden/qwen3-bf16; do
		run "$m" | while read pt pts gt gts wb; do
			frac=$(awk -v wb="$wb" -v t="$gts" -v bw="$bwn" 'BEGIN { printf "%.1f", 100 * wb * t / (bw * 1e9) }')
			echo "$(basename "$m"): prompt $pt tokens at $pts tok/s; decode $gt tokens at $gts tok/s; $wb weight bytes/token -> $frac% of the copy bandwidth"
		done
	done
} | tee "$out"
