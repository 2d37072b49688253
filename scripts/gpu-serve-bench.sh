#!/bin/bash
# gpu-serve-bench.sh - run on the GPU machine with binaries in .gpubuild/ (OUT set by the
# device tool): gpu-test.sh, atlas-doctor, the 32-concurrent identical-to-alone check
# on CUDA, and serve throughput / TTFT on a synthetic Qwen3-8B-shape model.
T=$OUT/t; python3 scripts/make-synthetic.py qwen3-0.6b /tmp/q06 >/dev/null; SYNTH=/tmp/q06 bash scripts/gpu-test.sh $T .gpubuild | tail -8
.gpubuild/atlas-doctor > $T/doctor.txt 2>&1; echo "doctor exit $?"; head -20 $T/doctor.txt
.gpubuild/atlas-serve -m tests/fixtures/golden/qwen3-bf16 --port 18080 --max-seqs 32 > $T/serve1.log 2>&1 & P=$!; sleep 4
python3 scripts/serve-check.py http://127.0.0.1:18080 32 > $T/check.txt 2>&1; cat $T/check.txt; kill $P
python3 scripts/make-synthetic.py qwen3-8b /tmp/q8 >/dev/null; sed -i 's/"eos_token_id": 1021/"eos_token_id": 151935/' /tmp/q8/config.json
.gpubuild/atlas-serve -m /tmp/q8 --port 18081 --max-seqs 64 -c 1024 -v > $T/serve8.log 2>&1 & P=$!
python3 -c "
import time,urllib.request
for i in range(120):
    try:
        urllib.request.urlopen('http://127.0.0.1:18081/health'); break
    except Exception: time.sleep(1)"
timeout 300 python3 scripts/serve-load.py http://127.0.0.1:18081 --concurrency 1,8,32,64 --prompt 512 --gen 256 | tee $T/load.jsonl
kill $P; tail -3 $T/serve8.log; tar czf $OUT/t.tgz -C $OUT t; rm -rf $T
