#!/usr/bin/env node
// generate.js: token generation, Kiln's server loop vs ONNX Runtime running the same
// decode-with-past model in a loop (prefill, then one step per token feeding the present
// back as the past), greedy, in one script. A benchmark, not a test.
//
//   node bench/generate.js --url http://127.0.0.1:PORT --model NAME --onnx M.onnx
//        [--prompts 32,64,128,256] [--new 64] [--streams 16] [--threads 2] [--rounds 3]
//        [--peer ort|none] [--json FILE]
//
// Kiln: POST /v2/models/NAME/generate_stream (Server-Sent Events); time to first token is
// request to first event, inter-token the gaps between events (one token each at one
// stream). One stream: the prompts one after another. N streams: N requests at once, prompt
// lengths cycling through --prompts; aggregate tokens/s = tokens / wall time. --rounds rounds,
// alternating which side runs first, each with prompts of its own; each row keeps its best round.
// --peer none: Kiln alone (an A/B of two Kiln builds), with kilnd's CPU time per round from
// --pid.
// ORT: graph optimization `all`, --threads intra-op threads; one stream at a time (the same
// prompts), its aggregate over N streams being its one-stream rate: a loop has no batching.
'use strict';
const fs = require('fs');
const http = require('http');
const path = require('path');
const {execFileSync} = require('child_process');
const {loadOrt} = require('./tools/ort');

function parseArgs(argv) {
  const o = {prompts: [32, 64, 128, 256], new: 64, streams: 16, threads: 2, rounds: 3, peer: 'ort'};
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
    if (k === 'prompts') o.prompts = v.split(',').map(Number);
    else o[k] = ['url', 'model', 'onnx', 'json', 'peer'].includes(k) ? v : Number(v);  // pid: a number
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

// kilnd's CPU time (user + system) and minor page faults from /proc, or nothing without a pid.
function procStat(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  const hz = 100;  // USER_HZ on Linux
  return {cpu_ms: (Number(f[11]) + Number(f[12])) * 1000 / hz, faults: Number(f[7])};
}

// Runs fn and adds kilnd's CPU time and page faults over it to its summary.
async function withKilnd(pid, fn) {
  if (!pid) return fn();
  const a = procStat(pid);
  const s = await fn();
  const b = procStat(pid);
  return {...s, cpu_ms: b.cpu_ms - a.cpu_ms, faults: b.faults - a.faults};
}

function line(name, s) {
  return `${name.padEnd(22)} ${s.tokens_per_s.toFixed(1).padStart(8)} tok/s  TTFT p50 ${s.ttft_p50_ms.toFixed(1)} ` +
         `p99 ${s.ttft_p99_ms.toFixed(1)} ms  inter-token p50 ${s.itl_p50_ms.toFixed(2)} p99 ${s.itl_p99_ms.toFixed(2)} ms`;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const peer = o.peer !== 'none';
  const ort = peer ? loadOrt('generate') : null;
  const meta = JSON.parse(execFileSync('/usr/bin/python3', ['-c',
    'import onnx,sys,json; m=onnx.load(sys.argv[1], load_external_data=False);' +
    'd=[i for i in m.graph.input if i.name.startswith("past_key_values")][0].type.tensor_type.shape.dim;' +
    'l=[o for o in m.graph.output if o.name=="logits"][0].type.tensor_type.shape.dim;' +
    'print(json.dumps({"heads": d[1].dim_value, "headDim": d[3].dim_value, "vocab": l[2].dim_value}))', o.onnx]).toString());
  const session = peer ? await ort.InferenceSession.create(o.onnx, {
    graphOptimizationLevel: 'all', intraOpNumThreads: o.threads, interOpNumThreads: 1}) : null;
  // Each round has prompts of its own (seeded by the round), so no round reads another's
  // prompts from Kiln's prefix cache; the warm-up prompt is none of them.
  const oneOf = r => o.prompts.map((n, i) => prompt(n, i + 10000 * r, meta.vocab));
  const manyOf = r => Array.from({length: o.streams},
                                 (_, i) => prompt(o.prompts[i % o.prompts.length], 100 + i + 10000 * r, meta.vocab));
  const warm = prompt(o.prompts[0], 9999, meta.vocab);
  await kilnStream(o, warm);  // warm both sides once
  if (peer) await ortStream(ort, session, meta, o, warm);
  // The prompts one after another (ORT's loop has no batching: its many streams run so too).
  const inTurn = run => p => timed(async () => { const r = []; for (const x of p) r.push(await run(x)); return r; });
  const ortLoop = inTurn(x => ortStream(ort, session, meta, o, x));
  const sides = {
    kiln: {one: inTurn(x => kilnStream(o, x)),
           many: p => withKilnd(o.pid, () => timed(() => Promise.all(p.map(x => kilnStream(o, x)))))},
    ort: {one: ortLoop, many: ortLoop},
  };
  // Rounds alternate which side goes first; each row keeps its best round (a busy host only
  // ever slows a round down), and every round is printed and kept in the JSON.
  const rounds = [];
  for (let r = 0; r < o.rounds; ++r) {
    const round = {};
    for (const side of !peer ? ['kiln'] : r % 2 === 0 ? ['kiln', 'ort'] : ['ort', 'kiln']) {
      round[`${side}_one`] = await sides[side].one(oneOf(r));
      round[`${side}_many`] = await sides[side].many(manyOf(r));
    }
    rounds.push(round);
    if (!peer) {
      console.log(`round ${r + 1}: ${line('kiln, ' + o.streams + ' streams', round.kiln_many)}` +
                  (o.pid ? `  kilnd CPU ${round.kiln_many.cpu_ms} ms, ${round.kiln_many.faults} page faults` : ''));
      continue;
    }
    console.log(`round ${r + 1}: kiln/ort tokens/s 1 stream ${(round.kiln_one.tokens_per_s / round.ort_one.tokens_per_s).toFixed(2)}, ` +
                `${o.streams} streams ${(round.kiln_many.tokens_per_s / round.ort_many.tokens_per_s).toFixed(2)} ` +
                `(kiln ${round.kiln_many.tokens_per_s.toFixed(0)}, ort ${round.ort_many.tokens_per_s.toFixed(0)} tok/s)`);
  }
  const rows = {};
  for (const k of Object.keys(rounds[0])) {
    rows[k] = rounds.map(x => x[k]).reduce((a, b) => (b.tokens_per_s > a.tokens_per_s ? b : a));
  }
  if (o.json) fs.writeFileSync(o.json, JSON.stringify({options: o, rows, rounds}, null, 1));
  if (!peer) return;
  console.log(line('kiln, 1 stream', rows.kiln_one));
  console.log(line('ort loop, 1 stream', rows.ort_one));
  console.log(line(`kiln, ${o.streams} streams`, rows.kiln_many));
  console.log(line(`ort loop, ${o.streams} streams`, rows.ort_many));
  console.log(`kiln/ort tokens/s (best rounds): 1 stream ${(rows.kiln_one.tokens_per_s / rows.ort_one.tokens_per_s).toFixed(2)}, ` +
              `${o.streams} streams ${(rows.kiln_many.tokens_per_s / rows.ort_many.tokens_per_s).toFixed(2)}`);
}

main().catch(e => { console.error(e); process.exit(1); });
