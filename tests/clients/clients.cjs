// clients.cjs - the official OpenAI and Anthropic SDKs, unmodified,
// against a running atlas-serve (ATLAS_SERVE_URL); prints TAP.
//
//   node clients.cjs   (tests/clients/run starts the server and sets the URL)
//
// The packages come from the pinned install in tests/.cache/clients.
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

let n = 0, failed = 0;
const tests = [];
function test(name, fn) { tests.push([name, fn]); }
function check(cond, what) { if (!cond) throw new Error('check failed: ' + what); }

const chatReq = {
	model: 'tiny', temperature: 0, max_tokens: 8, ignore_eos: true,
	messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello there' }],
};

test('openai chat.completions.create', async () => {
	const r = await openai.chat.completions.create(chatReq);
	check(r.object === 'chat.completion', 'object');
	check(r.choices.length === 1, 'one choice');
	check(r.choices[0].message.role === 'assistant', 'role');
	check(typeof r.choices[0].message.content === 'string', 'content');
	check(r.choices[0].finish_reason === 'length', 'finish_reason ' + r.choices[0].finish_reason);
	check(r.usage.completion_tokens === 8, 'completion_tokens');
	check(r.usage.total_tokens === r.usage.prompt_tokens + 8, 'total_tokens');
});

test('openai chat.completions.create stream equals non-stream', async () => {
	const whole = await openai.chat.completions.create(chatReq);
	const stream = await openai.chat.completions.create({ ...chatReq, stream: true,
		stream_options: { include_usage: true } });
	let text = '', finish = null, usage = null, role = null, chunks = 0;
	for await (const c of stream) {
		chunks++;
		check(c.object === 'chat.completion.chunk', 'chunk object');
		if (c.usage) usage = c.usage;
		for (const ch of c.choices) {
			if (ch.delta.role) role = ch.delta.role;
			if (ch.delta.content) text += ch.delta.content;
			if (ch.finish_reason) finish = ch.finish_reason;
		}
	}
	check(chunks >= 3, 'several chunks');
	check(role === 'assistant', 'role');
	check(text === whole.choices[0].message.content, 'streamed text equals the whole text');
	check(finish === 'length', 'finish');
	check(usage && usage.completion_tokens === 8, 'usage chunk');
});

test('openai completions.create', async () => {
	const r = await openai.completions.create({ model: 'tiny', prompt: 'Once upon a time',
		max_tokens: 6, temperature: 0, ignore_eos: true });
	check(r.object === 'text_completion', 'object');
	check(typeof r.choices[0].text === 'string' && r.choices[0].text.length > 0, 'text');
	check(r.usage.completion_tokens === 6, 'usage');
});

test('openai completions.create stream', async () => {
	const whole = await openai.completions.create({ model: 'tiny', prompt: 'Once upon a time',
		max_tokens: 6, temperature: 0, ignore_eos: true });
	const s = await openai.completions.create({ model: 'tiny', prompt: 'Once upon a time',
		max_tokens: 6, temperature: 0, ignore_eos: true, stream: true });
	let text = '';
	for await (const c of s) text += c.choices.length ? c.choices[0].text : '';
	check(text === whole.choices[0].text, 'streamed text equals the whole text');
});

test('openai models.list', async () => {
	const page = await openai.models.list();
	const ids = [];
	for await (const m of page) ids.push(m.id);
	check(ids.length === 1 && ids[0] === 'tiny', 'ids ' + JSON.stringify(ids));
});

test('openai errors surface as APIError with status', async () => {
	try {
		await openai.chat.completions.create({ ...chatReq, n: 17 });
		throw new Error('no error');
	} catch (e) {
		check(e.status === 400, 'status ' + e.status);
		check(/'n' must be/.test(e.message), 'message ' + e.message);
	}
});

test('openai n = 3: three choices, the stream gives each its text', async () => {
	const req = { ...chatReq, n: 3, temperature: 1, seed: 9 };
	const whole = await openai.chat.completions.create(req);
	check(whole.choices.length === 3, 'three choices');
	check(whole.choices.every((c, i) => c.index === i), 'indexes');
	check(whole.usage.completion_tokens === 24, 'completion_tokens');
	check(whole.usage.prompt_tokens_details.cached_tokens >= 0, 'cached_tokens');
	const stream = await openai.chat.completions.create({ ...req, stream: true });
	const text = ['', '', ''], finish = [null, null, null];
	for await (const c of stream) {
		for (const ch of c.choices) {
			if (ch.delta.content) text[ch.index] += ch.delta.content;
			if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
		}
	}
	for (let i = 0; i < 3; i++) {
		check(text[i] === whole.choices[i].message.content, 'streamed text of ' + i);
		check(finish[i] === 'length', 'finish of ' + i);
	}
});

test('openai completions.create with a list of prompts', async () => {
	const r = await openai.completions.create({ model: 'tiny', prompt: ['Once upon a time', 'The sea'],
		n: 2, max_tokens: 4, temperature: 0, ignore_eos: true });
	check(r.choices.length === 4, 'four choices');
	check(r.choices[1].text === r.choices[0].text, 'greedy choices of a prompt agree');
	check(r.choices[3].index === 3, 'index');
});

const msgReq = {
	model: 'tiny', max_tokens: 8, temperature: 0, system: 'Be brief.',
	messages: [{ role: 'user', content: 'Hello there' }],
};

test('anthropic messages.create', async () => {
	const r = await anthropic.messages.create(msgReq);
	check(r.type === 'message' && r.role === 'assistant', 'type/role');
	check(r.content.length === 1 && r.content[0].type === 'text', 'content');
	check(['max_tokens', 'end_turn'].includes(r.stop_reason), 'stop_reason ' + r.stop_reason);
	check(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, 'usage');
	check(r.usage.cache_creation_input_tokens === 0, 'cache_creation_input_tokens');
	check(r.usage.cache_read_input_tokens >= 0, 'cache_read_input_tokens');
});

test('anthropic messages.stream equals messages.create', async () => {
	const whole = await anthropic.messages.create(msgReq);
	const stream = anthropic.messages.stream(msgReq);
	let text = '';
	const types = [];
	stream.on('text', (t) => { text += t; });
	for await (const ev of stream) types.push(ev.type);
	const fin = await stream.finalMessage();
	check(types[0] === 'message_start', 'first event ' + types[0]);
	check(types[types.length - 1] === 'message_stop', 'last event');
	check(types.includes('content_block_delta'), 'deltas');
	check(text === whole.content[0].text, 'streamed text equals the whole text');
	check(fin.stop_reason === whole.stop_reason, 'stop_reason');
	check(fin.usage.output_tokens === whole.usage.output_tokens, 'usage');
	check(fin.usage.input_tokens + fin.usage.cache_read_input_tokens ===
		whole.usage.input_tokens + whole.usage.cache_read_input_tokens, 'input tokens');
});

test('anthropic messages.create with stream: true', async () => {
	const s = await anthropic.messages.create({ ...msgReq, stream: true });
	let text = '', stop = null;
	for await (const ev of s) {
		if (ev.type === 'content_block_delta') text += ev.delta.text;
		if (ev.type === 'message_delta') stop = ev.delta.stop_reason;
	}
	check(text.length > 0 || stop === 'end_turn', 'text');
	check(stop !== null, 'stop_reason');
});

(async () => {
	console.log('1..' + tests.length);
	for (const [name, fn] of tests) {
		n++;
		try {
			await fn();
			console.log(`ok ${n} - clients: ${name}`);
		} catch (e) {
			failed++;
			console.log(`not ok ${n} - clients: ${name}`);
			console.log('# ' + String(e && e.stack || e).split('\n').join('\n# '));
		}
	}
	process.exit(failed ? 1 : 0);
})();
