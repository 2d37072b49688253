#!/usr/bin/env bats
# 0000-doctor-basic.bats - atlas-doctor: on this machine (the CPU path,
# usually without a driver) and with a fake libcuda.so.1 that reports
# two GPUs, plus the cache, model, port and JSON checks.

load test_helper

setup() {
	export HF_HUB_CACHE=$BATS_TEST_TMPDIR/cache
}

# free_port - a port nothing listens on (bound by the kernel then freed).
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

@test "--help, -h, --version, usage errors" {
	run -0 --separate-stderr atlas-doctor --help
	expect_match "${lines[0]}" '^usage: atlas-doctor ' "first line"
	for f in --model --port --json --help --version; do
		expect_contains "$output" "$f" "usage"
	done
	local long=$output
	run -0 atlas-doctor -h
	expect_eq "$output" "$long" "-h"
	run -0 atlas-doctor --version
	expect_match "$output" "^atlas-doctor $(cat "$ATLAS_SRC/VERSION")( |\$)" "version"
	run -2 --separate-stderr atlas-doctor extra
	expect_contains "$stderr" "'extra'"
	run -2 --separate-stderr atlas-doctor --port 0
	expect_contains "$stderr" "--port"
	run -2 --separate-stderr atlas-doctor --bogus
	expect_contains "$stderr" "--bogus"
}

@test "a healthy CPU machine: exit 0, the CPU backend works, no driver is only a warning" {
	run -0 --separate-stderr atlas-doctor --port "$(free_port)"
	expect_match "$output" "^ok +cpu backend +works" "cpu"
	expect_match "$output" "^(ok|warning) +driver " "driver"
	if printf '%s\n' "$output" | grep -q '^warning *driver'; then
		expect_contains "$output" "libcuda.so.1"
		expect_contains "$output" "fix: install the NVIDIA driver"
	fi
	expect_match "$output" "^ok +hf cache +$HF_HUB_CACHE \(will be created\)" "cache"
	expect_match "$output" "^(ok|warning) +disk +[0-9.]+ GiB free" "disk"
	expect_match "$output" "^ok +port +port [0-9]+ is free" "port"
	expect_match "$output" "^ok +models +0 in the cache" "models"
	expect_match "${lines[-1]}" "^0 problems, [0-9]+ warnings?$" "summary"
}

@test "--json: one object, ok true, every check with a status" {
	run -0 --separate-stderr atlas-doctor --json --port "$(free_port)"
	expect_eq "${#lines[@]}" 1 "lines"
	expect_contains "$output" '"ok":true,"problems":0,'
	expect_contains "$output" '"check":"cpu backend","status":"ok"'
	expect_contains "$output" '"check":"hf cache","status":"ok"'
}

@test "-m MODEL: a golden model validates and loads; a broken one is a problem, exit 1" {
	run -0 atlas-doctor -m "$GOLDEN/qwen3" --port "$(free_port)"
	expect_match "$output" "^ok +model +'$GOLDEN/qwen3' validates and loads \(qwen3, 2 layers\)" "model"
	local m
	m=$(model_copy "$GOLDEN/qwen3" broken)
	sed -i 's/"intermediate_size": 160/"intermediate_size": 128/' "$m/config.json"
	run -1 atlas-doctor -m "$m" --port "$(free_port)"
	expect_match "$output" "^problem +model +'$m' does not validate: 6 problems" "model"
	expect_contains "$output" "fix: run atlas-load validate"
	expect_match "${lines[-1]}" "^1 problem, " "summary"
	run -1 atlas-doctor -m /nonexistent/model --json
	expect_contains "$output" '"ok":false'
	expect_contains "$output" "/nonexistent/model"
}

@test "models in the cache are listed; a cache path that is a file is a problem" {
	mkdir -p "$HF_HUB_CACHE/models--org--alpha" "$HF_HUB_CACHE/models--org--beta"
	run -0 atlas-doctor --port "$(free_port)"
	expect_match "$output" "^ok +models +2 in the cache: org/(alpha|beta), org/(alpha|beta)$" "models"
	expect_match "$output" "^ok +hf cache +$HF_HUB_CACHE$" "cache"
	printf x >"$BATS_TEST_TMPDIR/afile"
	HF_HUB_CACHE=$BATS_TEST_TMPDIR/afile/hub run -1 atlas-doctor --port "$(free_port)"
	expect_match "$output" "^problem +hf cache " "cache"
}

@test "a port in use is a warning naming it" {
	local port pid i
	port=$(free_port)
	python3 -c 'import socket,sys,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(); print("up", flush=True); time.sleep(30)' "$port" >"$BATS_TEST_TMPDIR/l" &
	pid=$!
	for i in $(seq 100); do [ -s "$BATS_TEST_TMPDIR/l" ] && break; sleep 0.05; done
	run atlas-doctor --port "$port"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	[ "$status" -eq 0 ]
	expect_match "$output" "^warning +port +port $port is in use" "port"
	expect_contains "$output" "--port N"
}

@test "with a (fake) NVIDIA driver: GPUs listed with compute capability and memory" {
	local d=$BATS_TEST_TMPDIR/fakecuda
	fake_libcuda "$d" -D'NAME(d)=(d ? "Fake GPU B" : "Fake GPU A")' -D'MAJOR(d)=(d ? 8 : 9)'
	LD_LIBRARY_PATH=$d run atlas-doctor --port "$(free_port)"
	expect_match "$output" "^ok +driver +NVIDIA driver supporting CUDA 12.4$" "driver"
	expect_match "$output" "^ok +gpu +GPU 0: Fake GPU A, compute capability 9.0, 80.0 GiB total" "gpu 0"
	expect_match "$output" "^ok +gpu +GPU 1: Fake GPU B, compute capability 8.0, 80.0 GiB total" "gpu 1"
	# no build has kernels for the sm80 GPU (a CPU-only build, e.g. the
	# sanitizer one, has none for either): a problem, so exit 1
	if [[ $output == *"CPU-only build"* ]]; then
		expect_match "$output" "^problem +kernel targets +none \(CPU-only build\) but 2 GPUs" "kernel targets"
	else
		expect_match "$output" "^problem +kernel targets +.*GPU 1" "kernel targets"
	fi
	[ "$status" -eq 1 ]
	LD_LIBRARY_PATH=$d run atlas-doctor --json --port "$(free_port)"
	expect_contains "$output" '"gpus":[{"index":0,"name":"Fake GPU A","compute_capability":9'
}

@test "nccl: its version when the library loads, 'not found' (not a problem) otherwise" {
	local d=$BATS_TEST_TMPDIR/fakenccl
	mkdir -p "$d"
	cat >"$d/nccl.c" <<'C'
int ncclGetVersion(int *v) { *v = 22304; return 0; }
int ncclGetUniqueId(void *id) { return 0; }
int ncclCommInitRank(void) { return 0; }
int ncclCommDestroy(void *c) { return 0; }
int ncclAllReduce(void) { return 0; }
int ncclBroadcast(void) { return 0; }
const char *ncclGetErrorString(int r) { return "fake"; }
C
	${CC:-cc} -shared -fPIC -o "$d/libnccl-fake.so" "$d/nccl.c"
	ATLAS_NCCL_LIB=$d/libnccl-fake.so LD_LIBRARY_PATH=/nonexistent \
		run -0 atlas-doctor --port "$(free_port)"
	expect_match "$output" "^ok +nccl +NCCL 2\.23\.4 \($d/libnccl-fake.so\)$" "version"
	ATLAS_NCCL_LIB=/nonexistent/libnccl.so.2 LD_LIBRARY_PATH=/nonexistent \
		run -0 atlas-doctor --port "$(free_port)"
	expect_match "$output" "^ok +nccl +not found \(/nonexistent/libnccl.so.2; not needed without GPUs\)" "missing"
	ATLAS_NCCL_LIB=/nonexistent/libnccl.so.2 LD_LIBRARY_PATH=/nonexistent \
		run -0 atlas-doctor --json --port "$(free_port)"
	expect_contains "$output" '"check":"nccl","status":"ok"'
}

@test "with 3 (fake) GPUs: the peer-to-peer access matrix, a missing pair a warning" {
	local d=$BATS_TEST_TMPDIR/fakecuda
	fake_libcuda "$d" -DNGPU=3 -DPEER_ALL=0
	LD_LIBRARY_PATH=$d run atlas-doctor --port "$(free_port)"
	expect_match "$output" "^warning +p2p +peer-to-peer access 0->1; 1->0; 2->none \(4 of 6 pairs missing\)$" "p2p"
	LD_LIBRARY_PATH=$d run atlas-doctor --json --port "$(free_port)"
	expect_contains "$output" '"memory_free":0,"peer_access":[1]},'
	expect_contains "$output" '"peer_access":[]}]'
	fake_libcuda "$d" -DNGPU=3 -DPEER_ALL=1
	LD_LIBRARY_PATH=$d run atlas-doctor --port "$(free_port)"
	expect_match "$output" "^ok +p2p +peer-to-peer access between all 3 GPUs \(0->1,2; 1->0,2; 2->0,1\)$" "p2p all"
}
