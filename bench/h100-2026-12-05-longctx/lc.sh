set -u
B=.gpubuild; O=$OUT
sh scripts/gpu-unpack.sh $B >/dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $O/gpu.txt
HARNESS_ONLY=attention timeout 120 $B/tests/gpu/test-cuda-ops > $O/ops-att.log 2>&1
echo "ops attention rc=$? ok=$(grep -c '^ok' $O/ops-att.log) notok=$(grep -c '^not ok' $O/ops-att.log)" >> $O/sum.txt
ATLAS_TEST_DEVICE=cuda timeout 200 $B/tests/test-invariance > $O/invariance.log 2>&1
echo "invariance rc=$? $(tail -1 $O/invariance.log)" >> $O/sum.txt
for kb in 3 2; do
  ATLAS_CUDA_FD_KVBUF=$kb timeout 200 $B/tests/gpu/test-fused-decode > $O/fused-kb$kb.log 2>&1
  echo "fused kb$kb rc=$?" >> $O/sum.txt; grep -E "^# .*(worst|FAIL)|^not ok" $O/fused-kb$kb.log | tail -12 >> $O/sum.txt
done
run() { name=$1; p=$2; shift 2; timeout 150 "$@" decode --synthetic qwen3-8b --batch 1 --prompt $p --gen 64 --json > $O/$name.json 2> $O/$name.txt; echo "$name rc=$?" >> $O/sum.txt; grep -E "^1 " $O/$name.txt >> $O/sum.txt; }
run old 512,4096,32768 $B/atlas-bench-old
run new 512,4096,32768 $B/atlas-bench
run kb2 512,4096,32768 env ATLAS_CUDA_FD_KVBUF=2 $B/atlas-bench
run all 4096,32768 env ATLAS_CUDA_FD_L2AHEAD=0 $B/atlas-bench
run a16 4096,32768 env ATLAS_CUDA_FD_L2AHEAD=16 $B/atlas-bench
run unf-old 4096,32768 env ATLAS_CUDA_FUSED=0 $B/atlas-bench-old
run unf-new 4096,32768 env ATLAS_CUDA_FUSED=0 $B/atlas-bench
run inv-old "4096 --batch-invariant" $B/atlas-bench-old
run inv-new "4096 --batch-invariant" $B/atlas-bench
cat $O/sum.txt
