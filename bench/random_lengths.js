#!/usr/bin/env node
// random_lengths.js: a text encoder served by kilnd at random sequence lengths vs ONNX Runtime
// (onnxruntime-node) running the same requests in this process (a benchmark, not a test).
//
//   node bench/random_lengths.js --url http://127.0.0.1:PORT --model NAME --onnx M.onnx
//        [--requests 100] [--min 1] [--max 512] [--vocab 30522] [--threads 2] [--seed 7]
//        [--passes 2] [--settle 300] [--json FILE]
//
// `requests` lengths drawn uniformly from [min, max] (seeded); each request is one row of
// input_ids (ids in [0, vocab)) and an all-ones attention_mask. Kiln: KServe v2 REST infer
// with binary outputs (JSON inputs), timed at the client, so Kiln's numbers carry HTTP and
// encoding that ORT's in-process run() does not. The two sides alternate request by request,
// so both see the same machine state. Every pass replays the same lengths: pass 1 is what a
// fresh server gives, the last pass its steady state; "worst first/steady" is the largest
// ratio of a request's pass-1 latency to its own length's steady-state one (the issue's "no
// request slower than twice its steady-state latency"). Kiln's outputs are checked against
// ORT's (max abs difference printed). Prints p50/p99 per pass and side and the p99 ratio.
'use strict';
const fs = require('fs');
const path = require('path');
const http = require('http');
const {loadOrt} = require('./tools/ort');

function parseArgs(argv) {
  const o = {requests: 100, min: 1, max: 512, vocab: 30522, threads: 2, seed: 7, passes: 2, settle: 300};
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
    o[k] = ['url', 'model', 'onnx', 'json'].includes(k) ? v : Number(v);
  }
  if (!o.url || !o.model || !o.onnx) throw new Error('--url, --model and --onnx are required');
  return o;
}

function rng(seed) {  // xorshift32: the same lengths and ids on every run
  let s = seed >>> 0 || 1;
  return () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
}

function post(url, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, {method: 'POST', headers: {'Content-Type': 'application/json',
                                                             'Content-Length': body.length}}, res => {
      const chunks = [];
      res.on('data', c => chunks.push(c));
      res.on('end', () => resolve({status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks)}));
    });
    req.on('error', reject);
    req.end(body);
  });
}

// The first output's floats from a v2 response with binary outputs.
function firstOutput(res) {
  const headerLen = Number(res.headers['inference-header-content-length'] || res.body.length);
  const header = JSON.parse(res.body.subarray(0, headerLen).toString());
  if (res.status !== 200) throw new Error(`kilnd: ${res.status} ${JSON.stringify(header)}`);
  const o = header.outputs[0];
  const bytes = res.body.subarray(headerLen, headerLen + o.parameters.binary_data_size);
  return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
}

async function kilnInfer(o, ids) {
  const body = Buffer.from(JSON.stringify({
    inputs: [{name: 'input_ids', shape: [1, ids.length], datatype: 'INT64', data: ids},
             {name: 'attention_mask', shape: [1, ids.length], datatype: 'INT64', data: ids.map(() => 1)}],
    parameters: {binary_data_output: true}}));
  const t0 = process.hrtime.bigint();
  const res = await post(`${o.url}/v2/models/${o.model}/infer`, body);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  return {ms, out: firstOutput(res)};
}

async function ortInfer(ort, session, ids) {
  const t = v => new ort.Tensor('int64', BigInt64Array.from(v.map(BigInt)), [1, v.length]);
  const t0 = process.hrtime.bigint();
  const r = await session.run({input_ids: t(ids), attention_mask: t(ids.map(() => 1))});
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  return {ms, out: r[session.outputNames[0]].data};
}

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const ort = loadOrt('random_lengths');
  const session = await ort.InferenceSession.create(o.onnx, {
    intraOpNumThreads: o.threads, interOpNumThreads: 1, graphOptimizationLevel: 'all'});
  const r = rng(o.seed);
  const requests = Array.from({length: o.requests}, () => {
    const len = o.min + Math.floor(r() * (o.max - o.min + 1));
    return Array.from({length: len}, () => Math.floor(r() * o.vocab));
  });
  const passes = [];
  let maxDiff = 0;
  for (let p = 0; p < o.passes; ++p) {
    const kiln = [], ortMs = [];
    for (const ids of requests) {
      const k = await kilnInfer(o, ids);
      const x = await ortInfer(ort, session, ids);
      // ORT's pool spins for a while after a run: let it park before kiln's next turn, or
      // kiln would be timed beside a busy core (`settle` ms).
      await new Promise(resolve => setTimeout(resolve, o.settle));
      kiln.push(k.ms);
      ortMs.push(x.ms);
      for (let i = 0; i < x.out.length; ++i) maxDiff = Math.max(maxDiff, Math.abs(k.out[i] - x.out[i]));
    }
    passes.push({kiln, ort: ortMs});
  }
  const steady = passes[passes.length - 1];
  const worst = Math.max(...passes[0].kiln.map((ms, i) => ms / steady.kiln[i]));
  const rows = passes.map((p, i) => ({
    pass: i + 1, kiln_p50_ms: pct(p.kiln, 0.5), kiln_p99_ms: pct(p.kiln, 0.99),
    ort_p50_ms: pct(p.ort, 0.5), ort_p99_ms: pct(p.ort, 0.99),
    p99_ratio: pct(p.kiln, 0.99) / pct(p.ort, 0.99), p50_ratio: pct(p.kiln, 0.5) / pct(p.ort, 0.5)}));
  console.log(`${o.requests} requests, lengths ${o.min}..${o.max}, ORT ${(ort.env.versions || {}).common}, ${o.threads} threads`);
  for (const row of rows) {
    console.log(`pass ${row.pass}: kiln p50 ${row.kiln_p50_ms.toFixed(1)} ms p99 ${row.kiln_p99_ms.toFixed(1)} ms | ` +
                `ort p50 ${row.ort_p50_ms.toFixed(1)} ms p99 ${row.ort_p99_ms.toFixed(1)} ms | ` +
                `p50 ratio ${row.p50_ratio.toFixed(2)} p99 ratio ${row.p99_ratio.toFixed(2)}`);
  }
  console.log(`worst first/steady (kiln, same request): ${worst.toFixed(2)}; max |kiln - ort| ${maxDiff.toExponential(2)}`);
  if (o.json) fs.writeFileSync(o.json, JSON.stringify({options: o, passes: rows, worst_first_over_steady: worst,
                                                        max_abs_diff: maxDiff, lengths: requests.map(r => r.length), raw: passes}, null, 1));
}

main().catch(e => { console.error(e); process.exit(1); });
