#!/bin/bash
# gpu-embed-check.sh OUT [BUILD] - /v1/embeddings on the CUDA backend
# against the float64 reference of tests/fixtures/embed/qwen3-embed
# (transformers), and against the CPU backend: atlas-serve on each device,
# every fixture input in one request, last-token pooling as the fixture
# says, and the same with mean pooling (a copy with its pooling config
# changed). Writes OUT/embed-check.txt; exit status 0 when every cosine
# against the reference is above 0.9999.
set -u
out=${1:?usage: gpu-embed-check.sh OUT [BUILD]}
build=${2:-.gpubuild}
src=$(cd "$(dirname "$0")/.." && pwd)
case $build in /*) ;; *) build="$src/$build" ;; esac
cd "$src" || exit 1
sh scripts/gpu-unpack.sh "$build"
mkdir -p "$out"
fix=tests/fixtures/embed/qwen3-embed
mean=/tmp/qwen3-embed-mean
rm -rf "$mean" && cp -r "$fix" "$mean"
sed -i 's/"pooling_mode_mean_tokens": false/"pooling_mode_mean_tokens": true/; s/"pooling_mode_lasttoken": true/"pooling_mode_lasttoken": false/' "$mean/1_Pooling/config.json"
status=0
for dev in cuda cpu; do
	for pool in last mean; do
		dir=$fix
		[ $pool = mean ] && dir=$mean
		"$build/atlas-serve" -m "$dir" --device $dev --port 0 2>/tmp/embed-$dev.log &
		pid=$!
		for i in $(seq 200); do grep -q '^atlas-serve: ready' /tmp/embed-$dev.log && break; sleep 0.1; done
		port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9][0-9]*\).*/\1/p' /tmp/embed-$dev.log)
		python3 - "$port" "$fix/expected.json" "$pool" "$dev" >>"$out/embed-check.txt" <<'PY' || status=1
import json, math, sys, urllib.request
port, exp, pool, dev = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
cases = exp["cases"]
req = json.dumps({"input": [c["input"] for c in cases]}).encode()
r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:%s/v1/embeddings" % port, req,
                                                  {"Content-Type": "application/json"}))
data = json.load(r)["data"]
worst = 1.0
for c, d in zip(cases, data):
    a, b = d["embedding"], c[pool]
    cos = sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    worst = min(worst, cos)
print("%s %s pooling: %d inputs, worst cosine against transformers %.7f %s" %
      (dev, pool, len(data), worst, "ok" if worst > 0.9999 else "FAIL"))
sys.exit(0 if worst > 0.9999 else 1)
PY
		kill $pid 2>/dev/null
		wait $pid 2>/dev/null
	done
done
grep -h "ready\|error" /tmp/embed-*.log >>"$out/embed-check.txt"
cat "$out/embed-check.txt"
exit $status
