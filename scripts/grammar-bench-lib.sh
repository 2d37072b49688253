# grammar-bench-lib.sh - sourced by cpu-grammar-bench.sh and
# gpu-grammar-bench.sh: reading atlas-run's timing lines.

# step_ms LO HI < stderr: the per-step decode time of the prompts numbered
# [LO, HI] (timing lines come in input order): generation time after the
# first token over the steps after the first, the slowest of them (they
# run together).
step_ms() {
	awk -v lo="$1" -v hi="$2" '/generated [0-9]+ tokens in/ { k++; if (k < lo || k > hi) next
		for (i = 1; i <= NF; i++) if ($i == "generated") { n = $(i + 1); t = $(i + 4) }
		ms = t / (n - 1); if (ms > worst) worst = ms } END { printf "%.3f", worst }'
}

# pct FREE CONSTRAINED: the relative cost, e.g. +4.0%
pct() { awk -v f="$1" -v s="$2" 'BEGIN { printf "%+.1f%%", (s / f - 1) * 100 }'; }
