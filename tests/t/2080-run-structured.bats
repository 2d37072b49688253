#!/usr/bin/env bats
# 2080-run-structured.bats - structured output in batch jobs: atlas-run
# --json-schema, --json, --grammar and --regex make every prompt's output
# match (the model is tiny, so the shape is what is checked), -f batches
# included; bad schemas and grammars are refused before anything runs.

load test_helper

setup() {
	P=$BATS_TEST_TMPDIR
	cat >"$P/schema.json" <<'SCHEMA'
{"type": "object",
 "properties": {"name": {"type": "string", "maxLength": 10},
                "age": {"type": "integer", "minimum": 0},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 2}},
 "required": ["name", "age", "tags"], "additionalProperties": false}
SCHEMA
}

@test "--json-schema: each output of a -f batch parses and fits the schema" {
	command -v node >/dev/null || { echo "node is not installed" >&2; return 1; }
	printf '%s\n' '{"prompt":"A person:"}' '{"prompt":"Another one:"}' '{"prompt":"JSON please"}' >"$P/in.jsonl"
	atlas-run -f "$P/in.jsonl" --jsonl --json-schema "$P/schema.json" -n 120 --temperature 1 --seed 4 -q >"$P/out"
	node -e '
		const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n");
		if (lines.length !== 3) throw new Error("3 outputs, got " + lines.length);
		for (const l of lines) {
			const v = JSON.parse(JSON.parse(l).text);
			const ok = typeof v.name === "string" && v.name.length <= 10 && Number.isInteger(v.age) &&
				v.age >= 0 && Array.isArray(v.tags) && v.tags.length >= 1 && v.tags.length <= 2 &&
				v.tags.every(t => t === "a" || t === "b") && Object.keys(v).length === 3;
			if (!ok) throw new Error("does not fit: " + l);
		}' "$P/out"
}

@test "--regex and --grammar: the whole output matches" {
	out=$(atlas-run -p "Code:" --regex '[A-Z]{2}-[0-9]{4}' -n 20 --temperature 1 --seed 2 -q)
	expect_match "$out" '^[A-Z]{2}-[0-9]{4}$' "regex output"
	printf 'root ::= answer "."\nanswer ::= "yes" | "no" | "maybe"\n' >"$P/g.gbnf"
	out=$(atlas-run -p "Well?" --grammar "$P/g.gbnf" -n 20 --temperature 1 --seed 3 -q)
	expect_match "$out" '^(yes|no|maybe)\.$' "grammar output"
	out=$(atlas-run -p "Data:" --json -n 200 --temperature 0.7 --seed 1 -q)
	expect_match "$out" '^[[:space:]]*\{' "--json output"
}

@test "bad structured-output input: a clear error and exit 1; conflicting flags exit 2" {
	printf '{"type": "object", "patternProperties": {"a": {}}}' >"$P/bad.json"
	run atlas-run -p x --json-schema "$P/bad.json" -q
	expect_eq "$status" 1
	expect_contains "$output" "patternProperties"
	printf 'root ::= nothing-here\n' >"$P/bad.gbnf"
	run atlas-run -p x --grammar "$P/bad.gbnf" -q
	expect_eq "$status" 1
	expect_contains "$output" "undefined rule 'nothing-here'"
	run atlas-run -p x --json-schema "$P/missing.json" -q
	expect_eq "$status" 1
	expect_contains "$output" "missing.json"
	run atlas-run -p x --json --regex a -q
	expect_eq "$status" 2
	expect_contains "$output" "cannot be combined"
}
