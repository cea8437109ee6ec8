#!/usr/bin/env node
// generate.js: token generation, Kiln's server loop vs ONNX Runtime running the same
// decode-with-past model in a loop (prefill, then one step per token feeding the present
// back as the past), greedy, in one script. A benchmark, not a test.
//
//   node bench/generate.js --url http://127.0.0.1:PORT --model NAME --onnx M.onnx
//        [--prompts 32,64,128,256] [--new 64] [--streams 16] [--threads 2] [--json FILE]
//
// Kiln: POST /v2/models/NAME/generate_stream (Server-Sent Events); time to first token is
// request to first event, inter-token the gaps between events (one token each at one
// stream). One stream: the prompts one after another. N streams: N requests at once, prompt
// lengths cycling through --prompts; aggregate tokens/s = tokens / wall time.
// ORT: graph optimization `all`, --threads intra-op threads; one stream at a time (the same
// prompts), its aggregate over N streams being its one-stream rate: a loop has no batching.
'use strict';
const fs = require('fs');
const http = require('http');
const path = require('path');
const {execFileSync} = require('child_process');
const {loadOrt} = require('./tools/ort');

function parseArgs(argv) {
  const o = {prompts: [32, 64, 128, 256], new: 64, streams: 16, threads: 2};
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
    if (k === 'prompts') o.prompts = v.split(',').map(Number);
    else o[k] = ['url', 'model', 'onnx', 'json'].includes(k) ? v : Number(v);
  }
  if (!o.url || !o.model || !o.onnx) throw new Error('--url, --model and --onnx are required');
  return o;
}

function prompt(n, seed, vocab) {
  const p = [];
  let x = seed * 7919 + 13;
  for (let i = 0; i < n; ++i) { x = (x * 1103515245 + 12345) % 2147483648; p.push(x % vocab); }
  return p;
}

function pct(v, q) {
  const s = [...v].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))] : NaN;
}

// One SSE generation: {ttft, gaps[], tokens}.
function kilnStream(o, ids) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({input_ids: ids, parameters: {max_tokens: o.new, ignore_eos: true}});
    const t0 = process.hrtime.bigint();
    let last = null, ttft = null, tokens = 0, buf = '';
    const gaps = [];
    const req = http.request(`${o.url}/v2/models/${o.model}/generate_stream`,
                             {method: 'POST', headers: {'Content-Type': 'application/json'}}, res => {
      if (res.statusCode !== 200) { reject(new Error(`HTTP ${res.statusCode}`)); return; }
      res.on('data', d => {
        buf += d;
        let at;
        while ((at = buf.indexOf('\n\n')) >= 0) {
          const ev = JSON.parse(buf.slice(6, at));
          buf = buf.slice(at + 2);
          if (ev.error) { reject(new Error(ev.error)); return; }
          const now = process.hrtime.bigint();
          if (ev.output_ids.length) {
            if (ttft === null) ttft = Number(now - t0) / 1e6;
            else gaps.push(Number(now - last) / 1e6 / ev.output_ids.length);
            last = now;
            tokens += ev.output_ids.length;
          }
        }
      });
      res.on('end', () => resolve({ttft, gaps, tokens}));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function argmaxLast(logits, vocab) {
  const d = logits.data, off = d.length - vocab;
  let best = 0;
  for (let v = 1; v < vocab; ++v) if (d[off + v] > d[off + best]) best = v;
  return best;
}

// ORT's loop: prefill with an empty past, then one token per step, the present fed back.
async function ortStream(ort, session, meta, o, ids) {
  const {heads, headDim, vocab} = meta;
  const i64 = a => BigInt64Array.from(a.map(BigInt));
  const feeds = {};
  let past = 0, seq = ids;
  for (const name of session.inputNames) {
    if (name.startsWith('past_key_values')) feeds[name] = new ort.Tensor('float32', new Float32Array(0), [1, heads, 0, headDim]);
  }
  const t0 = process.hrtime.bigint();
  let last = t0, ttft = null;
  const gaps = [];
  for (let t = 0; t < o.new; ++t) {
    const n = seq.length;
    feeds.input_ids = new ort.Tensor('int64', i64(seq), [1, n]);
    // Only the inputs the model has (a decoder may derive its positions, or take no mask).
    if (session.inputNames.includes('position_ids')) {
      feeds.position_ids = new ort.Tensor('int64', i64(seq.map((_, k) => past + k)), [1, n]);
    }
    if (session.inputNames.includes('attention_mask')) {
      feeds.attention_mask = new ort.Tensor('int64', new BigInt64Array(past + n).fill(1n), [1, past + n]);
    }
    const out = await session.run(feeds);
    const next = argmaxLast(out.logits, vocab);
    for (const name of session.inputNames) {
      if (name.startsWith('past_key_values')) feeds[name] = out[name.replace('past_key_values', 'present')];
    }
    past += n;
    seq = [next];
    const now = process.hrtime.bigint();
    if (ttft === null) ttft = Number(now - t0) / 1e6; else gaps.push(Number(now - last) / 1e6);
    last = now;
  }
  return {ttft, gaps, tokens: o.new};
}

function summarize(runs, wallMs) {
  const ttft = runs.map(r => r.ttft), gaps = runs.flatMap(r => r.gaps);
  const tokens = runs.reduce((a, r) => a + r.tokens, 0);
  return {tokens, tokens_per_s: tokens / (wallMs / 1000), ttft_p50_ms: pct(ttft, 0.5), ttft_p99_ms: pct(ttft, 0.99),
          itl_p50_ms: pct(gaps, 0.5), itl_p99_ms: pct(gaps, 0.99)};
}

async function timed(fn) {
  const t0 = process.hrtime.bigint();
  const runs = await fn();
  return summarize(runs, Number(process.hrtime.bigint() - t0) / 1e6);
}

function line(name, s) {
  return `${name.padEnd(22)} ${s.tokens_per_s.toFixed(1).padStart(8)} tok/s  TTFT p50 ${s.ttft_p50_ms.toFixed(1)} ` +
         `p99 ${s.ttft_p99_ms.toFixed(1)} ms  inter-token p50 ${s.itl_p50_ms.toFixed(2)} p99 ${s.itl_p99_ms.toFixed(2)} ms`;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const ort = loadOrt('generate');
  const meta = JSON.parse(execFileSync('/usr/bin/python3', ['-c',
    'import onnx,sys,json; m=onnx.load(sys.argv[1], load_external_data=False);' +
    'd=[i for i in m.graph.input if i.name.startswith("past_key_values")][0].type.tensor_type.shape.dim;' +
    'l=[o for o in m.graph.output if o.name=="logits"][0].type.tensor_type.shape.dim;' +
    'print(json.dumps({"heads": d[1].dim_value, "headDim": d[3].dim_value, "vocab": l[2].dim_value}))', o.onnx]).toString());
  const session = await ort.InferenceSession.create(o.onnx, {
    graphOptimizationLevel: 'all', intraOpNumThreads: o.threads, interOpNumThreads: 1});
  const prompts = o.prompts.map((n, i) => prompt(n, i, meta.vocab));
  const many = Array.from({length: o.streams}, (_, i) => prompt(o.prompts[i % o.prompts.length], 100 + i, meta.vocab));
  await kilnStream(o, prompts[0]);  // warm both sides once
  await ortStream(ort, session, meta, o, prompts[0]);
  const rows = {};
  rows.kiln_one = await timed(async () => { const r = []; for (const p of prompts) r.push(await kilnStream(o, p)); return r; });
  rows.ort_one = await timed(async () => { const r = []; for (const p of prompts) r.push(await ortStream(ort, session, meta, o, p)); return r; });
  rows.kiln_many = await timed(() => Promise.all(many.map(p => kilnStream(o, p))));
  rows.ort_many = await timed(async () => { const r = []; for (const p of many) r.push(await ortStream(ort, session, meta, o, p)); return r; });
  console.log(line('kiln, 1 stream', rows.kiln_one));
  console.log(line('ort loop, 1 stream', rows.ort_one));
  console.log(line(`kiln, ${o.streams} streams`, rows.kiln_many));
  console.log(line(`ort loop, ${o.streams} streams`, rows.ort_many));
  console.log(`kiln/ort tokens/s: 1 stream ${(rows.kiln_one.tokens_per_s / rows.ort_one.tokens_per_s).toFixed(2)}, ` +
              `${o.streams} streams ${(rows.kiln_many.tokens_per_s / rows.ort_many.tokens_per_s).toFixed(2)}`);
  if (o.json) fs.writeFileSync(o.json, JSON.stringify({options: o, rows}, null, 1));
}

main().catch(e => { console.error(e); process.exit(1); });
