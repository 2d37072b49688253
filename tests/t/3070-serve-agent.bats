#!/usr/bin/env bats
# 3070-serve-agent.bats - the agent API on the default model: tool calls
# forced by tool_choice (--tool-parser hermes, since the model's own
# template has no tool syntax), streamed and not, OpenAI and Anthropic;
# response_format, the grammar and regex extensions; count_tokens;
# content null; and every bad input a 400 naming its field. The model is
# tiny, so only what the grammar guarantees is checked: the shape of the
# output. JSON is checked with node (scripts/install-deps installs it).

load 3000-serve-helper

setup_file() {
	serve_start H --tool-parser hermes
	serve_start P --no-prefix-cache
}

teardown_file() {
	serve_stop H
	serve_stop P
}

fail() {
	printf '%s\n' "$1" >&2
	return 1
}

expect_not_contains() { # HAYSTACK NEEDLE [WHAT]
	case $1 in
	*"$2"*)
		printf '%s contains "%s":\n%s\n' "${3:-text}" "$2" "$1" >&2
		return 1
		;;
	esac
}

# js CODE - run node with the last body on stdin as `b` (parsed JSON);
# fails the test when CODE throws.
js() {
	command -v node >/dev/null || fail "node is not installed (scripts/install-deps)"
	printf '%s' "$body" | node -e '
		let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
			const b = JSON.parse(s);
			function check(c, w) { if (!c) { console.error("check failed: " + w + "\n" + s); process.exit(1); } }
			'"$1"'
		});'
}

TOOLS='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":12},"unit":{"enum":["c","f"]}},"required":["city","unit"],"additionalProperties":false}}},{"type":"function","function":{"name":"noop","parameters":{"type":"object","properties":{}}}}]'
ASK='"messages":[{"role":"user","content":"Weather in Paris?"}]'

@test "tool_choice required, one call: a hermes call with arguments that fit the schema" {
	http POST "$H_URL/v1/chat/completions" "{$ASK,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"max_tokens\":200,\"temperature\":0.8,\"seed\":2}"
	expect_eq "$status_code" 200
	js '
		const c = b.choices[0], m = c.message;
		check(c.finish_reason === "tool_calls", "finish_reason " + c.finish_reason);
		check(m.content === null, "content null");
		check(m.tool_calls.length >= 1, "a call");
		for (const t of m.tool_calls) {
			check(/^call_[A-Za-z0-9]{24}$/.test(t.id), "id");
			const a = JSON.parse(t.function.arguments);
			if (t.function.name === "get_weather") {
				check(typeof a.city === "string" && a.city.length <= 12, "city");
				check(a.unit === "c" || a.unit === "f", "unit");
				check(Object.keys(a).length === 2, "no other keys");
			} else {
				check(t.function.name === "noop", "known tool " + t.function.name);
			}
		}'
}

@test "tool_choice naming a function, streamed: delta.tool_calls with id, name, then arguments" {
	http POST "$H_URL/v1/chat/completions" "{$ASK,\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},\"parallel_tool_calls\":false,\"max_tokens\":120,\"temperature\":0.8,\"seed\":3,\"stream\":true}"
	expect_eq "$status_code" 200
	expect_contains "$body" '"tool_calls":[{"index":0,"id":"call_' "first delta"
	expect_contains "$body" '"name":"get_weather"' "name"
	expect_contains "$body" '"finish_reason":"tool_calls"' "finish"
	expect_contains "$body" 'data: [DONE]' "done"
	body=$(printf '%s\n' "$body" | sed -n 's/^data: \({.*}\)$/\1/p' | paste -sd, | sed 's/^/[/; s/$/]/')
	js '
		let args = "", n = 0;
		for (const ch of b) for (const c of ch.choices)
			for (const d of c.delta.tool_calls || []) {
				check(d.index === 0, "one call");
				if (d.function.arguments) { args += d.function.arguments; n++; }
			}
		check(n >= 2, "arguments in several deltas");
		const a = JSON.parse(args);
		check(typeof a.city === "string" && (a.unit === "c" || a.unit === "f"), "arguments " + args);'
}

@test "response_format json_schema, regex and grammar: the content matches" {
	http POST "$H_URL/v1/chat/completions" '{"messages":[{"role":"user","content":"x"}],"max_tokens":80,"temperature":1,"seed":1,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object","properties":{"n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["n","ok"],"additionalProperties":false}}}}'
	expect_eq "$status_code" 200
	js 'const v = JSON.parse(b.choices[0].message.content);
		check(Number.isInteger(v.n) && typeof v.ok === "boolean" && Object.keys(v).length === 2, JSON.stringify(v));'
	http POST "$H_URL/v1/completions" '{"prompt":"Code:","max_tokens":20,"temperature":1,"seed":1,"regex":"[0-9]{3}-[a-z]{2}"}'
	expect_eq "$status_code" 200
	[[ "$(completion_text "$body")" =~ ^[0-9]{3}-[a-z]{2}$ ]] || fail "regex output: $body"
	http POST "$H_URL/v1/completions" '{"prompt":"Answer:","max_tokens":20,"temperature":1,"seed":1,"grammar":"root ::= \"yes\" | \"no\""}'
	expect_eq "$status_code" 200
	text=$(completion_text "$body")
	[ "$text" = yes ] || [ "$text" = no ] || fail "grammar output: $body"
	expect_contains "$body" '"finish_reason":"stop"' "finished by the grammar"
}

@test "Anthropic tool_choice any: a tool_use block and stop_reason tool_use, streamed with input_json_delta" {
	tools='[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"]}}]'
	http POST "$H_URL/v1/messages" "{\"model\":\"m\",\"max_tokens\":100,\"temperature\":0,\"tools\":$tools,\"tool_choice\":{\"type\":\"any\"},$ASK}"
	expect_eq "$status_code" 200
	js 'const u = b.content.filter(x => x.type === "tool_use");
		check(u.length >= 1 && /^toolu_/.test(u[0].id) && u[0].name === "get_weather", JSON.stringify(b.content));
		check(typeof u[0].input.city === "string", "input");
		check(b.stop_reason === "tool_use", b.stop_reason);'
	http POST "$H_URL/v1/messages" "{\"model\":\"m\",\"max_tokens\":100,\"temperature\":0,\"stream\":true,\"tools\":$tools,\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\"},$ASK}"
	expect_eq "$status_code" 200
	expect_contains "$body" '"content_block":{"type":"tool_use","id":"toolu_' "tool_use block"
	expect_contains "$body" '"type":"input_json_delta","partial_json":' "input deltas"
	expect_contains "$body" '"stop_reason":"tool_use"' "stop reason"
}

@test "count_tokens equals usage.input_tokens; tool_use and tool_result history; content null" {
	# P has no prefix cache: input_tokens is then the whole prompt
	req='"system":"count zx81 tokens here","messages":[{"role":"user","content":"How many tokens qq7?"}]'
	http POST "$P_URL/v1/messages/count_tokens" "{\"model\":\"m\",$req}"
	expect_eq "$status_code" 200
	count=$(printf '%s' "$body" | sed -n 's/^{"input_tokens":\([0-9]*\)}$/\1/p')
	[ -n "$count" ] || fail "count_tokens body: $body"
	http POST "$P_URL/v1/messages" "{\"model\":\"m\",\"max_tokens\":2,$req}"
	expect_eq "$status_code" 200
	expect_contains "$body" "\"input_tokens\":$count," "usage.input_tokens"
	http POST "$H_URL/v1/messages" '{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42"}]}]}'
	expect_eq "$status_code" 200
	http POST "$H_URL/v1/chat/completions" '{"max_tokens":2,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"call_1","content":"42"}]}'
	expect_eq "$status_code" 200
}

@test "bad agent input: a 400 naming the field, and the server stays up" {
	http POST "$H_URL/v1/chat/completions" "{$ASK,\"tools\":{\"a\":1}}"
	expect_error 400 tools "'tools' must be a list"
	http POST "$H_URL/v1/chat/completions" "{$ASK,\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}"
	expect_error 400 tool_choice "names function 'nope', which is not in 'tools'"
	http POST "$H_URL/v1/chat/completions" "{$ASK,\"tool_choice\":\"required\"}"
	expect_error 400 tool_choice "'tools' is empty or missing"
	http POST "$H_URL/v1/chat/completions" "{$ASK,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\",\"patternProperties\":{}}}}}"
	expect_error 400 response_format "patternProperties"
	http POST "$H_URL/v1/chat/completions" "{$ASK,\"grammar\":\"root ::= undefined-rule\"}"
	expect_error 400 grammar "undefined rule 'undefined-rule'"
	http POST "$H_URL/v1/chat/completions" "{$ASK,\"regex\":\"(a\"}"
	expect_error 400 regex "'regex'"
	http POST "$H_URL/v1/chat/completions" "{$ASK,\"regex\":\"a\",\"grammar\":\"root ::= \\\"a\\\"\"}"
	expect_error 400 "" "only one of"
	http POST "$H_URL/v1/chat/completions" "{$ASK,\"chat_template_kwargs\":[1]}"
	expect_error 400 chat_template_kwargs "must be an object"
	http POST "$H_URL/v1/chat/completions" "{$ASK,\"reasoning_effort\":\"extreme\"}"
	expect_error 400 reasoning_effort "must be one of"
	http POST "$P_URL/v1/chat/completions" "{$ASK,\"tools\":$TOOLS,\"tool_choice\":\"required\"}"
	expect_error 400 tool_choice "--tool-parser"
	http POST "$H_URL/v1/messages" "{\"model\":\"m\",\"max_tokens\":4,\"tools\":[{\"name\":\"f\"}],$ASK}"
	expect_eq "$status_code" 400
	expect_contains "$body" '"type":"error"' "Anthropic error shape"
	expect_contains "$body" "input_schema" "names the field"
	http GET "$H_URL/health"
	expect_eq "$status_code" 200
}

@test "tools with tool_choice auto pass through the template; no parser means plain content" {
	http POST "$P_URL/v1/chat/completions" "{$ASK,\"tools\":$TOOLS,\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true}"
	expect_eq "$status_code" 200
	expect_contains "$body" '"finish_reason":"length"' "plain finish"
	expect_not_contains "$body" '"tool_calls"' "no calls"
	expect_contains "$(cat "$H_LOG")" "tool calls hermes" "the log names the parser"
	expect_contains "$(cat "$P_LOG")" "tool calls none" "and its absence"
}
