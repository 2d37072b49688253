#!/usr/bin/env bats
# 2050-run-chat.bats - chat templates on the command line: the template
# subcommand, --chat, --chat-template, tokenize --show, tokenizer-only
# model directories, and the bad inputs of tokenizers and templates.

load test_helper

QWEN3=$ATLAS_SRC/tests/fixtures/chat/qwen3
GEMMA3=$ATLAS_SRC/tests/fixtures/chat/gemma3

# tok_only NAME [SRC] - a directory with just the tokenizer files of SRC
# (default: the shipped model); prints its path.
tok_only() {
	local d=$BATS_TEST_TMPDIR/$1
	mkdir -p "$d"
	cp "${2:-$DEFAULT_MODEL}/tokenizer.json" "${2:-$DEFAULT_MODEL}/tokenizer_config.json" "$d/"
	printf '%s\n' "$d"
}

# with_template NAME TEMPLATE - a copy of the shipped model whose
# tokenizer_config.json holds TEMPLATE (a JSON string body) as chat_template.
with_template() {
	local m
	m=$(model_copy "$DEFAULT_MODEL" "$1")
	printf '{"eos_token": "<|endoftext|>", "chat_template": "%s"}\n' "$2" >"$m/tokenizer_config.json"
	printf '%s\n' "$m"
}

# --- template ----------------------------------------------------------------

@test "template: the shipped model's ChatML render, exactly, no newline added" {
	printf '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}' \
		>"$BATS_TEST_TMPDIR/req.json"
	atlas-run template <"$BATS_TEST_TMPDIR/req.json" >"$BATS_TEST_TMPDIR/got"
	printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n' \
		>"$BATS_TEST_TMPDIR/want"
	expect_same_file "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/want"
}

@test "template: add_generation_prompt false leaves the assistant turn closed" {
	printf '{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false}' |
		atlas-run template >"$BATS_TEST_TMPDIR/got"
	printf '<|im_start|>user\nHi<|im_end|>\n' >"$BATS_TEST_TMPDIR/want"
	expect_same_file "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/want"
}

@test "template: Qwen3's real template from a tokenizer-only directory, enable_thinking passed through" {
	local d
	d=$(tok_only qwen3 "$QWEN3")
	printf '{"messages": [{"role": "user", "content": "Hello!"}], "enable_thinking": false}' |
		atlas-run template -m "$d" >"$BATS_TEST_TMPDIR/got"
	printf '<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' \
		>"$BATS_TEST_TMPDIR/want"
	expect_same_file "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/want"
	printf '{"messages": [{"role": "user", "content": "Hello!"}]}' |
		atlas-run template -m "$d" >"$BATS_TEST_TMPDIR/got"
	printf '<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n' >"$BATS_TEST_TMPDIR/want"
	expect_same_file "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/want"
}

@test "template: tools and extra keys reach the template" {
	local m
	m=$(with_template tools '{% for t in tools %}{{ t.function.name }}={{ t | tojson }};{% endfor %}{{ flavour }}')
	run -0 --separate-stderr sh -c "printf '%s' '{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"flavour\": \"mint\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"a\": 1.5}}}]}' | atlas-run template -m '$m'"
	expect_eq "$output" 'f={"type": "function", "function": {"name": "f", "parameters": {"a": 1.5}}};mint' "render"
}

@test "template: standard input that is not JSON, or has no messages: exit 1, clear message" {
	run -1 --separate-stderr sh -c 'echo "{not json" | atlas-run template'
	expect_contains "$stderr" "not a JSON request object" "stderr"
	run -1 --separate-stderr sh -c 'echo "{\"prompt\": \"x\"}" | atlas-run template'
	expect_contains "$stderr" '"messages"' "stderr"
	run -1 --separate-stderr sh -c 'echo "{\"messages\": []}" | atlas-run template'
	expect_contains "$stderr" "empty conversation" "stderr"
	run -1 --separate-stderr sh -c 'printf "" | atlas-run template'
	expect_contains "$stderr" "not a JSON request object" "stderr"
}

@test "template: a model without a chat template is named, exit 1" {
	local d
	d=$(tok_only plain)
	printf '{"eos_token": "<|endoftext|>"}\n' >"$d/tokenizer_config.json"
	run -1 --separate-stderr sh -c "echo '{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}' | atlas-run template -m '$d'"
	expect_contains "$stderr" "has no chat template" "stderr"
	expect_contains "$stderr" "$d" "stderr"
	local m
	m=$(model_copy "$DEFAULT_MODEL" plainmodel)
	cp "$d/tokenizer_config.json" "$m/"
	run -1 --separate-stderr atlas-run -m "$m" -p hi --chat-template
	expect_contains "$stderr" "has no chat template" "stderr"
}

# --- bad templates -----------------------------------------------------------

@test "a template with a syntax error: load fails naming the file and the line" {
	local m
	m=$(with_template syntax 'one\n{% if x %}\n{{ x + }}\n{% endif %}')
	run -1 --separate-stderr atlas-run tokenize -m "$m" </dev/null
	expect_contains "$stderr" "tokenizer_config.json" "stderr"
	expect_contains "$stderr" "line 3" "stderr"
	expect_contains "$stderr" "syntax error" "stderr"
}

@test "a template with an unknown filter or statement: the construct and line are named" {
	local m
	m=$(with_template filter '\n{{ messages | shuffle }}')
	run -1 --separate-stderr atlas-run tokenize -m "$m" </dev/null
	expect_contains "$stderr" "line 2: unknown filter 'shuffle'" "stderr"
	m=$(with_template stmt "{% include 'other.jinja' %}")
	run -1 --separate-stderr atlas-run tokenize -m "$m" </dev/null
	expect_contains "$stderr" "line 1: the 'include' statement is not supported" "stderr"
}

@test "a template that calls raise_exception: its message is shown, exit 1" {
	local d
	d=$(tok_only gemma3 "$GEMMA3")
	run -1 --separate-stderr sh -c "echo '{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]}' | atlas-run template -m '$d'"
	expect_contains "$stderr" "Conversation roles must alternate user/assistant/user/assistant/..." "stderr"
	expect_empty "$output" "stdout"
}

@test "--chat-template with a template that raises: the message, exit 1" {
	local m
	m=$(with_template raise "{{ raise_exception('no ' ~ messages[0].role ~ ' turns here') }}")
	run -1 --separate-stderr atlas-run -m "$m" -p hi --chat-template -n 2
	expect_contains "$stderr" "no user turns here" "stderr"
}

# --- --chat-template and --chat ----------------------------------------------

@test "--chat-template: -p is wrapped as one user turn (prompt size matches the render)" {
	run -0 --separate-stderr atlas-run -p Hi --chat-template --system "Be brief." -n 2 --temperature 0
	local want
	want=$(printf '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}' |
		atlas-run template | atlas-run tokenize --whole --no-special)
	expect_contains "$stderr" "prompt $(count_words "$want") tokens" "stderr"
}

@test "--chat: one turn prints what -p --chat-template prints" {
	run -0 --separate-stderr atlas-run -p "Hello there" --chat-template -n 6 --temperature 0 --ignore-eos -q
	local want=$output
	run -0 --separate-stderr sh -c 'echo "Hello there" | atlas-run --chat -n 6 --temperature 0 --ignore-eos -q'
	expect_eq "$output" "$want" "reply"
	expect_empty "$stderr" "stderr"
}

@test "--chat --system: the system message is part of the first turn" {
	run -0 --separate-stderr atlas-run -p "Hi" --chat-template --system "Talk like a pirate." -n 5 --temperature 0 --ignore-eos -q
	local want=$output
	run -0 --separate-stderr sh -c 'echo Hi | atlas-run --chat --system "Talk like a pirate." -n 5 --temperature 0 --ignore-eos -q'
	expect_eq "$output" "$want" "reply"
}

@test "--chat: later turns take the conversation so far from the prefix cache; a trailing backslash continues the line" {
	run -0 --separate-stderr sh -c 'printf "first \\\\\nline\nsecond\n" | atlas-run --chat -n 3 --temperature 0 --ignore-eos -v'
	expect_eq "${#lines[@]}" 2 "reply lines"
	local turns
	turns=$(printf '%s\n' "$stderr" | grep 'chat turn:')
	expect_eq "$(printf '%s\n' "$turns" | wc -l)" 2 "turns"
	# turn 1: the whole render of "first \nline" (the backslash joins with a newline)
	local want n
	want=$(printf '{"messages": [{"role": "user", "content": "first \\nline"}]}' |
		atlas-run template | atlas-run tokenize --whole --no-special)
	n=$(count_words "$want")
	expect_match "$(printf '%s\n' "$turns" | sed -n 1p)" "chat turn: $n prompt tokens, 0 of them from the prefix cache" "turn 1"
	# turn 2 finds at least turn 1's whole KV blocks (16 tokens each) in the cache
	local cached
	cached=$(printf '%s\n' "$turns" | sed -n 2p | sed -E 's/.*tokens, ([0-9]+) of them.*/\1/')
	expect_match "$cached" '^[0-9]+$' "turn 2's cached count"
	[ "$cached" -ge $((n / 16 * 16)) ] && [ "$cached" -gt 0 ] ||
		{ echo "turn 2 took $cached tokens from the cache, turn 1 had $n" >&2; false; }
}

@test "--chat: replies are the same with and without the prefix cache" {
	local in='printf "hello there\nand again\nonce more\n"'
	run -0 --separate-stderr sh -c "$in | atlas-run --chat -n 8 --temperature 0 -q"
	local want=$output
	run -0 --separate-stderr sh -c "$in | atlas-run --chat -n 8 --temperature 0 -q --no-prefix-cache"
	expect_eq "$output" "$want" "replies"
}

@test "--chat: end of input at once ends cleanly with no output" {
	run -0 --separate-stderr atlas-run --chat -n 2 </dev/null
	expect_empty "$output" "stdout"
	expect_empty "$stderr" "stderr"
}

@test "--chat: a model without a chat template is an error" {
	local m
	m=$(model_copy "$DEFAULT_MODEL" notmpl)
	printf '{"eos_token": "<|endoftext|>"}\n' >"$m/tokenizer_config.json"
	run -1 --separate-stderr sh -c "echo hi | atlas-run -m '$m' --chat -n 2"
	expect_contains "$stderr" "has no chat template" "stderr"
}

@test "chat usage errors exit 2" {
	run -2 --separate-stderr atlas-run --chat -p hi
	expect_contains "$stderr" "--chat" "stderr"
	run -2 --separate-stderr atlas-run --chat --jsonl
	expect_contains "$stderr" "--jsonl" "stderr"
	run -2 --separate-stderr atlas-run -p hi --system x
	expect_contains "$stderr" "--system needs" "stderr"
	run -2 --separate-stderr atlas-run tokenize --chat-template
	expect_contains "$stderr" "--chat-template" "stderr"
	run -2 --separate-stderr atlas-run detokenize --show
	expect_contains "$stderr" "--show applies to 'tokenize'" "stderr"
	run -2 --separate-stderr atlas-run tokenize --show --jsonl
	expect_contains "$stderr" "cannot be used together" "stderr"
}

@test "--help lists the chat flags and the template subcommand" {
	run -0 --separate-stderr atlas-run --help
	for f in --chat --chat-template --system --show template; do
		expect_contains "$output" "$f" "usage"
	done
}

# --- tokenize --show -----------------------------------------------------------

@test "tokenize --show: id, text, bytes per token, special marked, blank line per input" {
	run -0 --separate-stderr sh -c 'printf "Hello world\n<|im_start|>é\n" | atlas-run tokenize --show'
	local ids
	ids=$(printf 'Hello world\n<|im_start|>é\n' | atlas-run tokenize)
	# the ids are those tokenize prints, in order
	local shown
	shown=$(printf '%s\n' "$output" | awk -F '\t' 'NF == 0 { print s; s = ""; next } { s = s (s == "" ? "" : " ") $1 } END { if (s != "") print s }')
	expect_eq "$shown" "$ids" "ids"
	expect_eq "${lines[0]}" "$(printf '39\t"H"\t48')" "first token"
	expect_contains "$output" "$(printf '"<|im_start|>"\t3c 7c 69 6d 5f 73 74 61 72 74 7c 3e\tspecial')" "special token"
	# é is two byte-level tokens here: each piece is shown with its byte
	expect_contains "$output" "$(printf '"\\u00c3"\tc3')" "first byte of é"
	expect_contains "$output" "$(printf '"\\u00a9"\ta9')" "second byte of é"
}

# --- tokenizer-only directories --------------------------------------------------

@test "tokenize and detokenize need only tokenizer.json (+ tokenizer_config.json)" {
	local d
	d=$(tok_only tokonly)
	[ ! -e "$d/config.json" ]
	local want
	want=$(printf 'Hello world\nsecond line\n' | atlas-run tokenize -m "$DEFAULT_MODEL")
	run -0 --separate-stderr sh -c "printf 'Hello world\nsecond line\n' | atlas-run tokenize -m '$d'"
	expect_eq "$output" "$want" "ids"
	run -0 --separate-stderr sh -c "printf 'Hello world\nsecond line\n' | atlas-run tokenize -m '$d' | atlas-run detokenize -m '$d'"
	expect_eq "$output" "$(printf 'Hello world\nsecond line')" "round trip"
	rm "$d/tokenizer_config.json"
	run -0 --separate-stderr sh -c "echo hi | atlas-run tokenize -m '$d' --show"
	expect_match "${lines[0]}" '^[0-9]+	"' "show without a config"
}

@test "tokenize --jsonl and detokenize --jsonl on a tokenizer-only directory: one line per input, in order" {
	local d
	d=$(tok_only tokjsonl)
	run -0 --separate-stderr sh -c "printf '{\"text\": \"one\"}\n{\"text\": \"two two\"}\n{\"text\": \"\"}\n' | atlas-run tokenize -m '$d' --jsonl --no-special"
	expect_eq "${#lines[@]}" 3 "lines"
	expect_match "${lines[0]}" '^\{"ids": \[[0-9]+(, [0-9]+)*\]\}$' "line 1"
	expect_eq "${lines[2]}" '{"ids": []}' "empty text"
	local ids=$output
	run -0 --separate-stderr sh -c "printf '%s\n' '$ids' | atlas-run detokenize -m '$d' --jsonl"
	expect_eq "${lines[0]}" '{"text": "one"}' "line 1"
	expect_eq "${lines[1]}" '{"text": "two two"}' "line 2"
	expect_eq "${lines[2]}" '{"text": ""}' "line 3"
}

# --- bad tokenizer.json ----------------------------------------------------------

@test "tokenizer.json with an unknown model type: refused at load, named" {
	local d
	d=$(tok_only badmodel)
	sed -i 's/"type": "BPE"/"type": "Frobnicate"/' "$d/tokenizer.json"
	run -1 --separate-stderr sh -c "echo hi | atlas-run tokenize -m '$d'"
	expect_contains "$stderr" "'Frobnicate'" "stderr"
	expect_empty "$output" "stdout"
}

@test "tokenizer.json with an unknown pre-tokenizer: refused at load, named" {
	local d
	d=$(tok_only badpretok)
	sed -i 's/"type": "Split"/"type": "Whatever"/' "$d/tokenizer.json"
	run -1 --separate-stderr sh -c "echo hi | atlas-run tokenize -m '$d'"
	expect_contains "$stderr" "'Whatever'" "stderr"
}

@test "tokenizer.json whose merges name unknown tokens: refused at load, named" {
	# Hugging Face tokenizers refuses such a file (MergeTokenOutOfVocabulary);
	local d
	d=$(tok_only badmerge)
	# the first merge is ["Ġ", "Ġ"]: make its left side a token not in the vocabulary
	awk '/"merges"/ { m = 1 } m && !done && /"Ġ"/ { sub(/"Ġ"/, "\"NOTATOKEN\""); done = 1 } { print }' \
		"$DEFAULT_MODEL/tokenizer.json" >"$d/tokenizer.json"
	grep -q NOTATOKEN "$d/tokenizer.json"
	run -1 --separate-stderr sh -c "echo hi | atlas-run tokenize -m '$d'"
	expect_contains "$stderr" "NOTATOKEN" "stderr"
}
