// make-qwen3-tiny.cjs OUTDIR TOKENIZER_DIR - a Qwen3 checkpoint with random
// weights and tiny layers (hidden 64, 2 layers) but the real Qwen3
// vocabulary, tokenizer and chat template (tools, <think>), for the agent
// tests: what it says is noise, but grammar-constrained output must still
// be a valid tool call or JSON document. TOKENIZER_DIR holds Qwen3's
// tokenizer.json and tokenizer_config.json. Deterministic (seeded), so a
// rerun writes the same bytes; about 20 MB.
'use strict';
const fs = require('fs');
const path = require('path');

const [out, tokdir] = process.argv.slice(2);
if (!out || !tokdir) {
	console.error('usage: make-qwen3-tiny.cjs OUTDIR TOKENIZER_DIR');
	process.exit(2);
}
const V = 151936, D = 64, L = 2, H = 2, KV = 1, HD = 32, F = 128;

let state = 0x2545f491n;
function rnd() { // xorshift64*, uniform in [-1, 1)
	state ^= state >> 12n; state ^= (state << 25n) & 0xffffffffffffffffn; state ^= state >> 27n;
	const x = (state * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn;
	return Number(x >> 11n) / 2 ** 52 - 1;
}
function bf16(n, scale, constant) {
	const b = Buffer.alloc(n * 2), f = new Float32Array(1), u = new Uint32Array(f.buffer);
	for (let i = 0; i < n; i++) {
		f[0] = constant !== undefined ? constant : rnd() * scale;
		b.writeUInt16LE(u[0] >>> 16, 2 * i);
	}
	return b;
}

const tensors = [];
function add(name, shape, scale, constant) {
	tensors.push([name, shape, bf16(shape.reduce((a, b) => a * b, 1), scale, constant)]);
}
add('model.embed_tokens.weight', [V, D], 1.0);
for (let l = 0; l < L; l++) {
	const p = `model.layers.${l}.`;
	add(p + 'input_layernorm.weight', [D], 0, 1);
	add(p + 'post_attention_layernorm.weight', [D], 0, 1);
	add(p + 'self_attn.q_proj.weight', [H * HD, D], 0.2);
	add(p + 'self_attn.k_proj.weight', [KV * HD, D], 0.2);
	add(p + 'self_attn.v_proj.weight', [KV * HD, D], 0.2);
	add(p + 'self_attn.o_proj.weight', [D, H * HD], 0.2);
	add(p + 'self_attn.q_norm.weight', [HD], 0, 1);
	add(p + 'self_attn.k_norm.weight', [HD], 0, 1);
	add(p + 'mlp.gate_proj.weight', [F, D], 0.2);
	add(p + 'mlp.up_proj.weight', [F, D], 0.2);
	add(p + 'mlp.down_proj.weight', [D, F], 0.2);
}
add('model.norm.weight', [D], 0, 1);

const header = { __metadata__: { format: 'pt' } };
let off = 0;
for (const [name, shape, buf] of tensors) {
	header[name] = { dtype: 'BF16', shape, data_offsets: [off, off + buf.length] };
	off += buf.length;
}
let hj = Buffer.from(JSON.stringify(header));
const pad = (8 - (hj.length % 8)) % 8;
hj = Buffer.concat([hj, Buffer.alloc(pad, 0x20)]);
const len = Buffer.alloc(8);
len.writeBigUInt64LE(BigInt(hj.length));

fs.mkdirSync(out, { recursive: true });
const tmp = path.join(out, 'model.safetensors.partial');
const fd = fs.openSync(tmp, 'w');
fs.writeSync(fd, len);
fs.writeSync(fd, hj);
for (const [, , buf] of tensors) fs.writeSync(fd, buf);
fs.closeSync(fd);
fs.renameSync(tmp, path.join(out, 'model.safetensors'));

const config = {
	architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', attention_bias: false,
	bos_token_id: 151643, eos_token_id: 151645, head_dim: HD, hidden_act: 'silu',
	hidden_size: D, intermediate_size: F, max_position_embeddings: 4096,
	num_attention_heads: H, num_hidden_layers: L, num_key_value_heads: KV,
	rms_norm_eps: 1e-6, rope_theta: 1000000.0, tie_word_embeddings: true,
	torch_dtype: 'bfloat16', vocab_size: V,
};
fs.writeFileSync(path.join(out, 'config.json'), JSON.stringify(config, null, 2) + '\n');
fs.writeFileSync(path.join(out, 'generation_config.json'),
	JSON.stringify({ eos_token_id: [151645, 151643], temperature: 0.6, top_p: 0.95, top_k: 20 }) + '\n');
for (const f of ['tokenizer.json', 'tokenizer_config.json'])
	fs.copyFileSync(path.join(tokdir, f), path.join(out, f));
