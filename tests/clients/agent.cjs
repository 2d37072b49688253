// agent.cjs - tool calls, structured output and count_tokens through the
// official OpenAI and Anthropic SDKs, against atlas-serve running a
// random-weight model with the real Qwen3 tokenizer and chat template
// (make-qwen3-tiny.cjs; tests/clients/run starts it). The model's words
// are noise, so everything checked here is what the grammar guarantees:
// a call to a tool that exists, arguments that satisfy its schema, JSON
// that satisfies response_format. Prints TAP.
'use strict';
const path = require('path');
const mods = process.env.ATLAS_CLIENTS_DIR ||
	path.join(__dirname, '..', '.cache', 'clients', 'node_modules');
const OpenAI = require(path.join(mods, 'openai')).default || require(path.join(mods, 'openai'));
const anthropicMod = require(path.join(mods, '@anthropic-ai', 'sdk'));
const Anthropic = anthropicMod.default || anthropicMod;

const base = process.env.ATLAS_SERVE_URL;
const openai = new OpenAI({ baseURL: base + '/v1', apiKey: 'test-key', maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: 'test-key', maxRetries: 0 });

const tests = [];
function test(name, fn) { tests.push([name, fn]); }
function check(cond, what) { if (!cond) throw new Error('check failed: ' + what); }

// The JSON-schema subset these tests use, checked strictly.
function validate(v, s, where = '$') {
	if (s.enum) check(s.enum.some(e => JSON.stringify(e) === JSON.stringify(v)), where + ' in enum');
	const t = s.type;
	if (t === 'object') {
		check(v && typeof v === 'object' && !Array.isArray(v), where + ' is an object');
		for (const r of s.required || []) check(r in v, where + '.' + r + ' present');
		for (const k of Object.keys(v)) {
			if (s.properties && s.properties[k]) validate(v[k], s.properties[k], where + '.' + k);
			else check(s.additionalProperties !== false, where + ': no extra property ' + k);
		}
	} else if (t === 'array') {
		check(Array.isArray(v), where + ' is an array');
		if (s.minItems !== undefined) check(v.length >= s.minItems, where + ' minItems');
		if (s.maxItems !== undefined) check(v.length <= s.maxItems, where + ' maxItems');
		v.forEach((x, i) => s.items && validate(x, s.items, where + '[' + i + ']'));
	} else if (t === 'string') {
		check(typeof v === 'string', where + ' is a string');
	} else if (t === 'integer') {
		check(Number.isInteger(v), where + ' is an integer');
	} else if (t === 'number') {
		check(typeof v === 'number', where + ' is a number');
	} else if (t === 'boolean') {
		check(typeof v === 'boolean', where + ' is a boolean');
	}
}

const weather = {
	type: 'object',
	properties: {
		city: { type: 'string', maxLength: 20 },
		unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
		days: { type: 'integer' },
	},
	required: ['city', 'unit'],
	additionalProperties: false,
};
const search = {
	type: 'object',
	properties: { query: { type: 'string', maxLength: 30 }, limit: { type: 'integer' } },
	required: ['query'],
	additionalProperties: false,
};
const tools = [
	{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: weather } },
	{ type: 'function', function: { name: 'search', description: 'Search the web', parameters: search } },
];
const schemaOf = { get_weather: weather, search };
const ask = { role: 'user', content: 'What is the weather in Paris?' };

function checkCalls(calls) {
	check(Array.isArray(calls) && calls.length >= 1, 'at least one tool call');
	for (const c of calls) {
		check(c.type === 'function', 'type function');
		check(/^call_[A-Za-z0-9]{24}$/.test(c.id), 'id shape ' + c.id);
		check(c.function.name in schemaOf, 'a known tool: ' + c.function.name);
		validate(JSON.parse(c.function.arguments), schemaOf[c.function.name]);
	}
}

test('openai tool_choice "required": a call whose arguments satisfy the schema', async () => {
	const r = await openai.chat.completions.create({ model: 'qwen3-tiny', messages: [ask], tools,
		tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200, temperature: 0, seed: 1 });
	const m = r.choices[0].message;
	checkCalls(m.tool_calls);
	check(r.choices[0].finish_reason === 'tool_calls', 'finish_reason ' + r.choices[0].finish_reason);
	check(m.content === null || m.content === '', 'no content besides the call');
});

test('openai tool_choice "required" streamed: deltas assemble into the same call', async () => {
	const req = { model: 'qwen3-tiny', messages: [ask], tools, tool_choice: 'required',
		max_tokens: 400, temperature: 0, seed: 1 };
	const whole = await openai.chat.completions.create(req);
	const stream = await openai.chat.completions.create({ ...req, stream: true });
	const calls = [];
	let finish = null, argChunks = 0;
	for await (const c of stream) {
		for (const ch of c.choices) {
			if (ch.finish_reason) finish = ch.finish_reason;
			for (const d of ch.delta.tool_calls || []) {
				if (!calls[d.index]) {
					check(d.id && d.function && d.function.name, 'first delta has id and name');
					calls[d.index] = { id: d.id, type: 'function', function: { name: d.function.name, arguments: '' } };
				}
				if (d.function && d.function.arguments) {
					calls[d.index].function.arguments += d.function.arguments;
					argChunks++;
				}
			}
		}
	}
	// parallel calls are allowed: the stream may end mid-call at max_tokens,
	// which the whole response leaves out
	const complete = finish === 'length' ? calls.slice(0, -1) : calls;
	checkCalls(complete);
	check(argChunks >= 2, 'arguments arrive in several deltas, not at the end: ' + argChunks);
	check(finish === 'tool_calls' || finish === 'length', 'finish ' + finish);
	const w = whole.choices[0].message.tool_calls;
	check(w.length === complete.length, 'as many calls as the whole response');
	for (let i = 0; i < w.length; i++) {
		check(w[i].function.name === calls[i].function.name, 'same name');
		check(w[i].function.arguments === calls[i].function.arguments, 'same arguments');
	}
});

test('openai tool_choice naming a function: only that one is called', async () => {
	for (const name of ['search', 'get_weather']) {
		const r = await openai.chat.completions.create({ model: 'qwen3-tiny', messages: [ask], tools,
			tool_choice: { type: 'function', function: { name } }, parallel_tool_calls: false,
			max_tokens: 200, temperature: 0.7, seed: 5 });
		const calls = r.choices[0].message.tool_calls;
		checkCalls(calls);
		check(calls.length === 1, 'one call without parallel_tool_calls');
		check(calls[0].function.name === name, 'called ' + calls[0].function.name);
	}
});

const answer = {
	type: 'object',
	properties: {
		title: { type: 'string', maxLength: 40 },
		year: { type: 'integer' },
		tags: { type: 'array', items: { type: 'string', maxLength: 10 }, minItems: 1, maxItems: 3 },
		author: { type: 'object', properties: { name: { type: 'string', maxLength: 20 } },
			required: ['name'], additionalProperties: false },
	},
	required: ['title', 'year', 'tags', 'author'],
	additionalProperties: false,
};

test('openai response_format json_schema: the content satisfies the schema, streamed too', async () => {
	const req = { model: 'qwen3-tiny', messages: [{ role: 'user', content: 'A book, as JSON.' }],
		response_format: { type: 'json_schema', json_schema: { name: 'book', schema: answer } },
		max_tokens: 300, temperature: 1, seed: 3 };
	const r = await openai.chat.completions.create(req);
	check(r.choices[0].finish_reason === 'stop', 'finished by the grammar: ' + r.choices[0].finish_reason);
	validate(JSON.parse(r.choices[0].message.content), answer);
	const s = await openai.chat.completions.create({ ...req, stream: true });
	let text = '';
	for await (const c of s) for (const ch of c.choices) text += ch.delta.content || '';
	check(text === r.choices[0].message.content, 'streamed text equals the whole text');
});

test('openai response_format json_object: a JSON object', async () => {
	const r = await openai.chat.completions.create({ model: 'qwen3-tiny',
		messages: [{ role: 'user', content: 'Anything, as JSON.' }],
		response_format: { type: 'json_object' }, max_tokens: 300, temperature: 1, seed: 4 });
	const text = r.choices[0].message.content;
	check(/^\s*\{/.test(text), 'begins as an object: ' + text.slice(0, 40));
	if (r.choices[0].finish_reason === 'stop') { // free-form strings may run to max_tokens
		const v = JSON.parse(text);
		check(v && typeof v === 'object' && !Array.isArray(v), 'an object');
	}
});

test('reasoning: the thought comes apart, --reasoning-budget ends it, then the schema applies', async () => {
	// the server runs with --reasoning-budget 12; this model opens <think>
	// when the first step allows it (thinking is on by default)
	const req = { model: 'qwen3-tiny', messages: [{ role: 'user', content: 'Think, then answer in JSON.' }],
		response_format: { type: 'json_schema', json_schema: { name: 'book', schema: answer } },
		max_tokens: 300, temperature: 0 };
	const r = await openai.chat.completions.create(req);
	const m = r.choices[0].message;
	check(typeof m.reasoning_content === 'string' && m.reasoning_content.length > 0, 'a thought');
	check(m.reasoning === m.reasoning_content, 'both names');
	check(r.choices[0].finish_reason === 'stop', 'finished by the grammar after thinking');
	validate(JSON.parse(m.content), answer);
	check(r.usage.completion_tokens <= 300, 'usage');
	const s = await openai.chat.completions.create({ ...req, stream: true });
	let thought = '', text = '';
	for await (const c of s) for (const ch of c.choices) {
		thought += ch.delta.reasoning_content || '';
		text += ch.delta.content || '';
	}
	check(thought === m.reasoning_content && text === m.content, 'the stream splits the same way');
	const off = await openai.chat.completions.create({ ...req, chat_template_kwargs: { enable_thinking: false } });
	check(!off.choices[0].message.reasoning_content, 'enable_thinking false: no thought');
	validate(JSON.parse(off.choices[0].message.content), answer);
	check(off.usage.prompt_tokens > r.usage.prompt_tokens, 'the template wrote the empty thought into the prompt');
});

test('openai: an assistant turn with content null and tool calls, then the tool result', async () => {
	const r = await openai.chat.completions.create({ model: 'qwen3-tiny', tools, max_tokens: 8,
		messages: [ask,
			{ role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
				function: { name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' } }] },
			{ role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21}' }] });
	check(r.choices.length === 1, 'answered');
	check(r.usage.prompt_tokens > 40, 'the call and the result are in the prompt');
});

test('openai bad agent input: 400 with the field named, the server stays up', async () => {
	const bad = [
		[{ tools: { not: 'a list' } }, 'tools'],
		[{ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
		[{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object',
			properties: { a: { type: 'string', contentMediaType: 'x' } } } } }], tool_choice: 'required' },
			'contentMediaType'],
		[{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object',
			patternProperties: { '^a': {} } } } } }, 'patternProperties'],
		[{ response_format: { type: 'yaml' } }, 'response_format'],
	];
	for (const [extra, what] of bad) {
		let err = null;
		try {
			await openai.chat.completions.create({ model: 'qwen3-tiny', messages: [ask], max_tokens: 4, ...extra });
		} catch (e) { err = e; }
		check(err && err.status === 400, 'status 400 for ' + what + ': ' + (err && err.status));
		check(JSON.stringify(err.error || err.message).includes(what), 'message names ' + what + ': ' +
			JSON.stringify(err.error));
	}
	const m = await openai.models.list();
	check(m.data.length === 1, 'still serving');
});

const aTools = [
	{ name: 'get_weather', description: 'Weather of a city', input_schema: weather },
	{ name: 'search', description: 'Search the web', input_schema: search },
];

test('anthropic tool_choice any: a tool_use block with valid input, stop_reason tool_use', async () => {
	const r = await anthropic.messages.create({ model: 'qwen3-tiny', max_tokens: 200, tools: aTools,
		tool_choice: { type: 'any' }, messages: [ask], temperature: 0 });
	const uses = r.content.filter(b => b.type === 'tool_use');
	check(uses.length >= 1, 'a tool_use block');
	for (const u of uses) {
		check(/^toolu_/.test(u.id), 'id ' + u.id);
		check(u.name in schemaOf, 'known tool ' + u.name);
		validate(u.input, schemaOf[u.name]);
	}
	check(r.stop_reason === 'tool_use', 'stop_reason ' + r.stop_reason);
});

test('anthropic tool_choice tool, streamed: input_json_delta events build the same input', async () => {
	const req = { model: 'qwen3-tiny', max_tokens: 200, tools: aTools,
		tool_choice: { type: 'tool', name: 'search', disable_parallel_tool_use: true },
		messages: [ask], temperature: 0 };
	const whole = await anthropic.messages.create(req);
	const s = anthropic.messages.stream(req);
	let deltas = 0;
	s.on('streamEvent', e => { if (e.type === 'content_block_delta' && e.delta.type === 'input_json_delta') deltas++; });
	const fin = await s.finalMessage();
	const u = fin.content.filter(b => b.type === 'tool_use');
	check(u.length === 1 && u[0].name === 'search', 'one search call');
	validate(u[0].input, search);
	check(deltas >= 2, 'input_json_delta events: ' + deltas);
	check(fin.stop_reason === 'tool_use', 'stop_reason');
	const w = whole.content.filter(b => b.type === 'tool_use');
	check(JSON.stringify(w[0].input) === JSON.stringify(u[0].input), 'same input as the whole response');
});

test('anthropic tool_use and tool_result blocks in the history are accepted', async () => {
	const r = await anthropic.messages.create({ model: 'qwen3-tiny', max_tokens: 8, tools: aTools,
		messages: [ask,
			{ role: 'assistant', content: [{ type: 'text', text: 'Let me look.' },
				{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris', unit: 'celsius' } }] },
			{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '21 degrees' }] }] });
	check(r.type === 'message', 'answered');
});

test('anthropic count_tokens equals the input_tokens of the same request', async () => {
	const unique = 'Zq' + Date.now() + ' ' + Math.random();
	const req = { model: 'qwen3-tiny', tools: aTools, system: unique,
		messages: [{ role: 'user', content: 'Count me, ' + unique }] };
	const c = await anthropic.messages.countTokens(req);
	const r = await anthropic.messages.create({ ...req, max_tokens: 2 });
	check(c.input_tokens > 100, 'the tools are counted: ' + c.input_tokens);
	check(c.input_tokens === r.usage.input_tokens, c.input_tokens + ' vs ' + r.usage.input_tokens);
});

(async () => {
	console.log('1..' + tests.length);
	let n = 0, failed = 0;
	for (const [name, fn] of tests) {
		n++;
		try {
			await fn();
			console.log(`ok ${n} - agent: ${name}`);
		} catch (e) {
			failed++;
			console.log(`not ok ${n} - agent: ${name}`);
			console.log('# ' + String(e && e.stack || e).split('\n').join('\n# '));
		}
	}
	process.exit(failed ? 1 : 0);
})();
