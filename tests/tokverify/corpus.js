// corpus.js - the deterministic test corpus of the tokenizer verification.
//
// generate(seed, n) returns n entries {text, bytes}: `text` is what both
// tokenizers encode (a JS string), `bytes` is a Buffer of raw bytes when the
// entry was built from invalid UTF-8 (then `text` is those bytes decoded
// with replacement characters, exactly as TextDecoder does) and null
// otherwise. The same seed always yields the same corpus, so the corpus is
// code, not a committed file. mixedText(seed, mb) builds the throughput
// text out of the same fragments.
'use strict';

function rng(seed) {
	// mulberry32: small, fast and reproducible across node versions
	let a = seed >>> 0;
	return function () {
		a = (a + 0x6d2b79f5) >>> 0;
		let t = a;
		t = Math.imul(t ^ (t >>> 15), t | 1);
		t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
}

const WORDS = ('the of and to in is was for that with as on by he at from his it an were are which ' +
	'this be or has had first one their its new after but who not they have her she two been other ' +
	'when there all during into school time may years more most only over city some world would where ' +
	'later up such used many can state about national out known university united then made ' +
	"don't it's we'll I'm you've they'd He'S WE'RE tokenizer byte-level merges vocabulary Atlas " +
	'inference engine GPU throughput latency café naïve résumé coöperate façade Zürich São Paulo').split(' ');
const CODE = [
	'int main(int argc, char **argv)\n{\n\tprintf("hello, %s\\n", argv[0]);\n\treturn 0;\n}\n',
	'def f(x):\n    """Square x."""\n    return x ** 2  # comment\n\nprint([f(i) for i in range(10)])\n',
	'const add = (a, b) => a + b;\nexport default { add };\n// TODO: fix === vs == && ||\n',
	'for (size_t i = 0; i < n; i++) {\r\n\tsum += a[i] * b[i];\r\n}\r\n',
	'SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;',
	'#!/bin/sh\nset -eu\nfor f in *.txt; do wc -l "$f"; done | sort -n\n',
	'<div class="x">\n  <a href="https://example.org/?q=1&amp;r=2">link</a>\n</div>',
	'fn main() { let v: Vec<u8> = vec![1, 2, 3]; println!("{:?}", v); }',
	'    if (x != NULL && *x) {\n        return -EINVAL;\n    }\n',
	'$ git log --oneline | head -n 5\n9c62867 Skeleton\n',
];
const CJK = ['我们今天去公园散步，天气很好。', '机器学习是人工智能的一个分支。', '東京都は日本の首都です。',
	'ひらがなとカタカナ、そして漢字。', 'カタカナのテキスト：コンピューター', '안녕하세요, 세계! 한국어 문장입니다.',
	'中文，标点：“引号”（括号）【方括号】！？', '繁體中文與简体中文混合。', '𠀀𠀁𪚥 (CJK extension B)'];
const ARABIC = ['مرحبا بالعالم', 'اللغة العربية جميلة جداً.', 'كَتَبَ الطَّالِبُ الدَّرْسَ', 'الرقم ١٢٣٤٥ والرقم 67890',
	'שלום עולם', 'Привет, мир! Ёжик.', 'Γειά σου Κόσμε', 'नमस्ते दुनिया', 'สวัสดีชาวโลก', 'Xin chào thế giới'];
const EMOJI = ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🧑🏿‍💻', '❤️', '🇫🇷🇯🇵', '👩‍❤️‍💋‍👨', '🫠', '✈︎', '1️⃣', '🐈‍⬛', '™', '©'];
const COMBINING = ['e\u0301', 'a\u0308\u0304', 'n\u0303', 'A\u030a', 'o\u0302\u0323', 'Z\u0351\u0352\u0353\u0354',
	'\u1e9b\u0323', 'q\u0307\u0323', 'u\u031b\u0300', '\u0915\u093c', '\u1100\u1161\u11a8', '\u212b', '\u2126',
	'\ufb01', '\u2460', '\uff21\uff22', 'x\u0300\u0301\u0302\u0303\u0304\u0305'];
const SPECIAL = ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<s>', '</s>', '<unk>', '<bos>', '<eos>',
	'<start_of_turn>', '<end_of_turn>', '<|begin_of_text|>', '<|eot_id|>', '<|start_header_id|>',
	'<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<|start|>', '<|end|>', '<|message|>', '<|channel|>',
	'<think>', '</think>', '<tool_call>', '<pad>', '<mask>', '<|fim_prefix|>', '<|im_end', 'im_end|>'];
const SPACES = [' ', '  ', '\t', '\n', '\r\n', '\u00a0', '\u3000', '\u2009', '\u200b', '\u2028', '\u000b', '\f'];

function pick(r, a) { return a[Math.floor(r() * a.length)]; }
function int(r, lo, hi) { return lo + Math.floor(r() * (hi - lo + 1)); }

function prose(r) {
	const n = int(r, 3, 40);
	let s = '';
	for (let i = 0; i < n; i++) {
		let w = pick(r, WORDS);
		if (i === 0 || r() < 0.05) w = w[0].toUpperCase() + w.slice(1);
		s += (i ? ' ' : '') + w;
		if (r() < 0.08) s += pick(r, [',', ';', ':', ' -', '!', '?', '...', '."']);
	}
	return s + pick(r, ['.', '!', '?', '', '\n']);
}
function json(r) {
	const o = {};
	for (let i = 0, n = int(r, 1, 6); i < n; i++) {
		const k = pick(r, ['id', 'name', 'value', 'tags', 'nested', 'ok', 'ratio', 'text']);
		const t = int(r, 0, 5);
		o[k] = t === 0 ? int(r, -1e6, 1e6) : t === 1 ? pick(r, WORDS) : t === 2 ? [1, 2.5, 'x', null]
			: t === 3 ? { a: true, b: [pick(r, CJK)] } : t === 4 ? r() : pick(r, EMOJI) + '"\\';
	}
	return JSON.stringify(o, null, r() < 0.5 ? 2 : undefined);
}
function digits(r) {
	let s = '';
	for (let i = 0, n = int(r, 1, 5); i < n; i++) {
		const len = int(r, 1, 40);
		for (let j = 0; j < len; j++) s += String(int(r, 0, 9));
		s += pick(r, [' ', '.', ',', '-', '', '/', ' + ', 'e', '%', '\n']);
	}
	if (r() < 0.2) s += '٠١٢٣٤٥٦٧٨٩ ０１２３ ½ ²³ Ⅻ';
	return s;
}
function whitespace(r) {
	let s = '';
	for (let i = 0, n = int(r, 1, 6); i < n; i++) {
		const w = pick(r, SPACES);
		s += w.repeat(int(r, 1, r() < 0.2 ? 300 : 12));
		if (r() < 0.7) s += pick(r, WORDS);
	}
	return s;
}
// Random characters from blocks whose every character was assigned by
// Unicode 14: regex classes such as \p{S} depend on the Unicode version
// of the regex engine (PCRE2 10.42 and Oniguruma 6.9.8 know 14.0, node
// knows a later one), which is no property of the tokenizer.
function unicodeRun(r) {
	const blocks = [[0x00c0, 0x024f], [0x0370, 0x03ff], [0x0400, 0x04ff], [0x0590, 0x05ff], [0x0600, 0x06ff],
		[0x0900, 0x097f], [0x0e00, 0x0e7f], [0x1e00, 0x1eff], [0x2000, 0x206f], [0x2190, 0x22ff],
		[0x3040, 0x30ff], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xfb00, 0xfb4f], [0xff00, 0xffef],
		[0x1f300, 0x1f64f], [0x1d400, 0x1d7ff], [0x20000, 0x2a6d6], [0x0300, 0x036f]];
	let s = '';
	for (let i = 0, n = int(r, 1, 30); i < n; i++) {
		const b = pick(r, blocks);
		s += String.fromCodePoint(int(r, b[0], b[1]));
		if (r() < 0.15) s += ' ';
	}
	return s;
}
function special(r) {
	let s = '';
	for (let i = 0, n = int(r, 1, 5); i < n; i++)
		s += pick(r, ['', ' ', '\n', 'x', ' hello ']) + pick(r, SPECIAL) + pick(r, ['', ' ', '\n\n', 'user', '  ']);
	return s;
}
// Raw bytes that are not UTF-8: lone continuations, truncated sequences,
// overlongs, encoded surrogates, bytes that never occur in UTF-8.
function invalid(r) {
	const bad = [[0x80], [0xbf], [0xc0, 0x80], [0xc3], [0xe4, 0xbd], [0xf0, 0x9f, 0x98], [0xed, 0xa0, 0x80],
		[0xf4, 0x90, 0x80, 0x80], [0xff], [0xfe, 0xff], [0xe0, 0x80, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80]];
	const parts = [];
	for (let i = 0, n = int(r, 1, 6); i < n; i++) {
		parts.push(Buffer.from(pick(r, [prose, digits, () => pick(r, CJK), () => pick(r, EMOJI), () => ' '])(r)));
		parts.push(Buffer.from(pick(r, bad)));
	}
	return Buffer.concat(parts);
}
const KINDS = {
	prose, json, digits, whitespace, unicodeRun, special,
	code: (r) => pick(r, CODE) + (r() < 0.5 ? pick(r, CODE) : ''),
	cjk: (r) => pick(r, CJK) + (r() < 0.5 ? pick(r, CJK) + prose(r) : ''),
	arabic: (r) => pick(r, ARABIC) + ' ' + pick(r, ARABIC),
	emoji: (r) => { let s = ''; for (let i = 0, n = int(r, 1, 8); i < n; i++) s += pick(r, EMOJI) + (r() < 0.3 ? ' ' : ''); return s; },
	combining: (r) => { let s = ''; for (let i = 0, n = int(r, 1, 8); i < n; i++) s += pick(r, COMBINING) + (r() < 0.3 ? pick(r, WORDS) + ' ' : ''); return s; },
	tabs: (r) => prose(r).replace(/ /g, () => pick(r, [' ', '\t', '\r\n', '\n', '\t\t', ' \t'])),
};
const NAMES = Object.keys(KINDS);

function mixed(r) {
	let s = '';
	for (let i = 0, n = int(r, 2, 6); i < n; i++)
		s += KINDS[pick(r, NAMES)](r) + pick(r, ['', ' ', '\n', '\n\n']);
	return s;
}

function generate(seed, n) {
	const r = rng(seed);
	const out = [{ text: '', bytes: null }, { text: ' ', bytes: null }, { text: 'a', bytes: null }];
	while (out.length < n) {
		const k = out.length % (NAMES.length + 2);
		if (k === NAMES.length) {
			const b = invalid(r);
			out.push({ text: new TextDecoder('utf-8').decode(b), bytes: b });
		} else {
			out.push({ text: k === NAMES.length + 1 ? mixed(r) : KINDS[NAMES[k]](r), bytes: null });
		}
	}
	return out;
}

// About `mb` megabytes of mixed text, as documents of a few kilobytes.
function mixedText(seed, mb) {
	const r = rng(seed), docs = [];
	let total = 0;
	while (total < mb * 1e6) {
		let d = '';
		while (d.length < 4000) d += mixed(r) + (r() < 0.6 ? prose(r) + ' ' + prose(r) : '') + '\n';
		docs.push(d);
		total += Buffer.byteLength(d);
	}
	return docs;
}

module.exports = { generate, mixedText };
