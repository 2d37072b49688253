#!/usr/bin/env bats
# 1000-fetch-basic.bats - atlas-fetch against the mock Hub: the command
# line, the HF cache layout it writes, include/exclude, revisions,
# --local-dir, --dry-run, offline mode, tokens, and atlas-run finding the
# fetched model.

load test_helper

setup() {
	hub_start
}

teardown() {
	hub_stop
}

SNAP_RE='/models--test--tiny/snapshots/[0-9a-f]{40}$'

@test "--help lists every flag; -h is the same; --version" {
	run -0 --separate-stderr atlas-fetch --help
	expect_match "${lines[0]}" '^usage: atlas-fetch ' "first line"
	for f in --revision --include --exclude --local-dir --jobs --token-file --retries \
		--dry-run --quiet --help --version HF_TOKEN HF_ENDPOINT HF_HUB_OFFLINE; do
		expect_contains "$output" "$f" "usage"
	done
	local long=$output
	run -0 atlas-fetch -h
	expect_eq "$output" "$long" "-h output"
	run -0 atlas-fetch --version
	expect_match "$output" "^atlas-fetch $(cat "$ATLAS_SRC/VERSION")( |\$)" "version"
}

@test "usage errors exit 2: no repo, two repos, bad id, bad flag, bad number, two revisions" {
	run -2 --separate-stderr atlas-fetch
	expect_contains "$stderr" "no repository given"
	run -2 --separate-stderr atlas-fetch test/tiny other/x
	expect_contains "$stderr" "'other/x'"
	run -2 --separate-stderr atlas-fetch not-a-repo
	expect_contains "$stderr" "'not-a-repo' is not a Hub repository id"
	run -2 --separate-stderr atlas-fetch --bogus test/tiny
	expect_contains "$stderr" "--bogus"
	run -2 --separate-stderr atlas-fetch -j 0 test/tiny
	expect_contains "$stderr" "--jobs"
	run -2 --separate-stderr atlas-fetch -r v1 test/tiny@main
	expect_contains "$stderr" "revision given twice"
	run -2 --separate-stderr atlas-fetch test/tiny@
	expect_contains "$stderr" "empty revision"
}

@test "fetch into the HF cache: blobs, snapshot links, refs/main; stdout is the snapshot" {
	run -0 --separate-stderr timeout 20 atlas-fetch test/tiny
	expect_match "$output" "$SNAP_RE" "stdout"
	local snap=$output repo=$HF_HUB_CACHE/models--test--tiny
	expect_eq "$(cat "$repo/refs/main")" "$(basename "$snap")" "refs/main"
	for f in config.json generation_config.json tokenizer.json tokenizer_config.json \
		model.safetensors; do
		[ -L "$snap/$f" ]
		expect_same_file "$snap/$f" "$GOLDEN/qwen3/$f"
	done
	# LFS blobs are named by their sha256, other files by the git blob sha1
	local sha
	sha=$(sha256sum "$GOLDEN/qwen3/model.safetensors" | cut -d' ' -f1)
	[ -f "$repo/blobs/$sha" ]
	expect_eq "$(readlink "$snap/model.safetensors")" "../../blobs/$sha" "link target"
	# the default patterns leave out the .bin duplicate, README and sub/notes.txt? no:
	# *.txt is a default pattern (merges.txt, vocab.txt)
	[ ! -e "$snap/pytorch_model.bin" ]
	[ ! -e "$snap/README.md" ]
	[ -L "$snap/sub/notes.txt" ]
	expect_eq "$(readlink "$snap/sub/notes.txt" | cut -c1-15)" "../../../blobs/" "nested link"
	# nothing temporary is left behind
	expect_empty "$(find "$HF_HUB_CACHE" -name '*.incomplete' -o -name '*.tmp')" "temporary files"
	expect_contains "$stderr" "5 files in place" "" || expect_contains "$stderr" "6 files in place"
}

@test "atlas-run -m ORG/NAME finds the fetched model and generates what the golden model does" {
	run -0 timeout 20 atlas-fetch -q test/tiny
	run -0 --separate-stderr atlas-run -m test/tiny -p "Hello" -n 8 --temperature 0 -q
	local fetched=$output
	run -0 --separate-stderr atlas-run -m "$GOLDEN/qwen3" -p "Hello" -n 8 --temperature 0 -q
	expect_eq "$fetched" "$output" "generated text"
}

@test "a second run downloads nothing and prints the same snapshot" {
	run -0 --separate-stderr timeout 20 atlas-fetch test/tiny
	local first=$output n
	n=$(hub_requests '/resolve/|/cdn/')
	run -0 --separate-stderr timeout 20 atlas-fetch test/tiny
	expect_eq "$output" "$first" "snapshot"
	expect_eq "$(hub_requests '/resolve/|/cdn/')" "$n" "file requests"
}

@test "--revision and @REV fetch the other revision; refs/v1 names its commit" {
	run -0 --separate-stderr timeout 20 atlas-fetch test/tiny@v1
	local snap=$output
	expect_same_file "$snap/config.json" "$GOLDEN/llama3/config.json"
	expect_eq "$(cat "$HF_HUB_CACHE/models--test--tiny/refs/v1")" "$(basename "$snap")" "refs/v1"
	run -0 --separate-stderr timeout 20 atlas-fetch --revision v1 test/tiny
	expect_eq "$output" "$snap" "same snapshot"
	# a commit sha as the revision writes no ref of that name
	local sha
	sha=$(basename "$snap")
	run -0 --separate-stderr timeout 20 atlas-fetch "test/tiny@$sha"
	[ ! -e "$HF_HUB_CACHE/models--test--tiny/refs/$sha" ]
	run -0 --separate-stderr atlas-run -m test/tiny@v1 -p hi -n 2 -q
}

@test "--include and --exclude select files; no match is an error" {
	run -0 --separate-stderr timeout 20 atlas-fetch -I '*.json' -X 'tokenizer*' test/tiny
	local snap=$output
	[ -e "$snap/config.json" ]
	[ -e "$snap/generation_config.json" ]
	[ ! -e "$snap/tokenizer.json" ]
	[ ! -e "$snap/model.safetensors" ]
	# an explicit include can fetch the .bin the defaults leave out
	run -0 --separate-stderr timeout 20 atlas-fetch --include pytorch_model.bin test/tiny
	expect_same_file "$output/pytorch_model.bin" "$GOLDEN/qwen3/model.safetensors"
	run -1 --separate-stderr timeout 20 atlas-fetch --include '*.gguf' test/tiny
	expect_contains "$stderr" "no file of 'test/tiny'"
}

@test "--dry-run lists files and bytes and writes nothing" {
	run -0 --separate-stderr timeout 20 atlas-fetch --dry-run test/tiny
	local model_bytes cfg_bytes
	model_bytes=$(wc -c <"$GOLDEN/qwen3/model.safetensors")
	expect_match "$output" "fetch +$model_bytes  model.safetensors" "plan"
	expect_contains "$output" "config.json"
	if printf '%s\n' "$output" | grep -q pytorch_model.bin; then false; fi
	expect_match "$output" "^6 files, [0-9]+ bytes to fetch; 0 files, 0 bytes already present" "summary"
	[ ! -e "$HF_HUB_CACHE/models--test--tiny" ]
	expect_eq "$(hub_requests '/resolve/|/cdn/')" 0 "file requests"
	# after fetching the config, the dry run counts it as present
	run -0 timeout 20 atlas-fetch -q -I config.json test/tiny
	run -0 --separate-stderr timeout 20 atlas-fetch -n test/tiny
	cfg_bytes=$(wc -c <"$GOLDEN/qwen3/config.json")
	expect_match "$output" "have +$cfg_bytes  config.json" "plan"
	expect_match "$output" "^5 files, [0-9]+ bytes to fetch; 1 files, $cfg_bytes bytes already present" "summary"
}

@test "--local-dir writes a plain copy and a re-run keeps it" {
	local d=$BATS_TEST_TMPDIR/plain
	run -0 --separate-stderr timeout 20 atlas-fetch --local-dir "$d" -j 2 test/tiny
	expect_eq "$output" "$d" "stdout"
	[ -f "$d/model.safetensors" ] && [ ! -L "$d/model.safetensors" ]
	expect_same_file "$d/model.safetensors" "$GOLDEN/qwen3/model.safetensors"
	[ ! -e "$HF_HUB_CACHE/models--test--tiny" ]
	local n
	n=$(hub_requests '/resolve/|/cdn/')
	run -0 timeout 20 atlas-fetch --local-dir "$d" test/tiny
	expect_eq "$(hub_requests '/resolve/|/cdn/')" "$n" "file requests"
	# a corrupted local copy is fetched again
	printf 'x' | dd of="$d/model.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
	run -0 timeout 20 atlas-fetch --local-dir "$d" test/tiny
	expect_same_file "$d/model.safetensors" "$GOLDEN/qwen3/model.safetensors"
	run -0 atlas-run -m "$d" -p hi -n 2 -q
}

@test "HF_HUB_OFFLINE=1 resolves from the cache, or fails clearly" {
	run -1 --separate-stderr env HF_HUB_OFFLINE=1 atlas-fetch test/tiny
	expect_contains "$stderr" "offline mode"
	expect_contains "$stderr" "'test/tiny'"
	run -0 timeout 20 atlas-fetch -q test/tiny
	local snap=$output n
	n=$(wc -l <"$HUB_LOG")
	run -0 --separate-stderr env HF_HUB_OFFLINE=1 atlas-fetch test/tiny
	expect_eq "$output" "$snap" "offline answer"
	expect_eq "$(wc -l <"$HUB_LOG")" "$n" "requests in offline mode"
	run -1 --separate-stderr env HF_HUB_OFFLINE=1 atlas-fetch test/tiny@v1
	expect_contains "$stderr" "'v1'"
	run -1 --separate-stderr env HF_HUB_OFFLINE=1 atlas-fetch --local-dir "$BATS_TEST_TMPDIR/x" test/tiny
	expect_contains "$stderr" "--local-dir"
}

@test "404: an unknown repository, revision; messages name them" {
	run -1 --separate-stderr timeout 20 atlas-fetch test/nosuch
	expect_contains "$stderr" "'test/nosuch'"
	expect_contains "$stderr" "404"
	run -1 --separate-stderr timeout 20 atlas-fetch test/tiny@nosuch
	expect_contains "$stderr" "no such revision"
	expect_contains "$stderr" "'nosuch'"
	# 404s are not retried
	expect_eq "$(hub_requests 'revision/nosuch')" 1 "requests"
}

@test "gated repository: 401 without a token and 403 with a wrong one say how to pass one" {
	run -1 --separate-stderr timeout 20 atlas-fetch test/gated
	expect_contains "$stderr" "401"
	expect_contains "$stderr" "HF_TOKEN"
	expect_contains "$stderr" "--token-file"
	run -1 --separate-stderr env HF_TOKEN=wrong timeout 20 atlas-fetch test/gated
	expect_contains "$stderr" "403"
	expect_contains "$stderr" "token"
}

@test "a token from HF_TOKEN or --token-file opens the gated repository and never reaches the CDN" {
	run -0 --separate-stderr env HF_TOKEN=secret timeout 20 atlas-fetch test/gated
	printf 'secret\n' >"$BATS_TEST_TMPDIR/tok"
	rm -rf "$HF_HUB_CACHE"
	run -0 --separate-stderr timeout 20 atlas-fetch --token-file "$BATS_TEST_TMPDIR/tok" test/gated
	[ -f "$output/model.safetensors" ]
	expect_eq "$(hub_requests '^GET /cdn/.*auth=yes')" 0 "CDN requests with a token"
	[ "$(hub_requests '^GET /cdn/.*auth=no')" -ge 2 ]
	[ "$(hub_requests '^GET /api/models/test/gated.*auth=yes')" -ge 2 ]
	run -1 --separate-stderr atlas-fetch --token-file "$BATS_TEST_TMPDIR/none" test/gated
	expect_contains "$stderr" "$BATS_TEST_TMPDIR/none"
}

@test "HF_ENDPOINT pointing nowhere: a clear network error after the retries" {
	hub_stop
	run -1 --separate-stderr env HF_ENDPOINT=http://127.0.0.1:1 timeout 20 atlas-fetch --retries 1 test/tiny
	expect_contains "$stderr" "127.0.0.1:1"
}
