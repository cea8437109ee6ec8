#!/usr/bin/env node
// decode_step.js: a decoder step with a key/value cache (tests/models/decoder_step.py) at
// several past lengths: ONNX Runtime at the exact length vs Kiln's CPU engine at the shape
// class kilnd would run it on (the length padded up the class ladder, server/model/padding.h), and
// at the exact length too. A benchmark, not a test.
//
//   node bench/decode_step.js --kiln build/tools/kiln --model M.onnx [--pasts 1,16,64,127,256,512,1023]
//        [--max 1024] [--runs 20] [--threads 2] [--json FILE]
//
// Per length: `kiln bench --dim past_sequence_length=N --dim sequence=1 --runs R` (its own
// warm-up) at the class and at the exact length, then R timed ORT runs (after one warm-up),
// ORT: graph optimization `all`, T intra-op threads, one new position (sequence 1), batch 1.
// The class ladder is ClassLadder(1, --max, 128): 1 16 24 32 48 64 96 128 192 256 384 512 768
// 1024 for max 1024. Prints p50 per side and the ratio Kiln(class)/ORT.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const {execFileSync} = require('child_process');
const {loadOrt} = require('./tools/ort');

function parseArgs(argv) {
  const o = {pasts: [1, 16, 64, 127, 256, 512, 1023], max: 1024, runs: 20, threads: 2};
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
    if (k === 'pasts') o.pasts = v.split(',').map(Number);
    else o[k] = ['kiln', 'model', 'json'].includes(k) ? v : Number(v);
  }
  if (!o.kiln || !o.model) throw new Error('--kiln and --model are required');
  return o;
}

// server/model/padding.cc's ClassLadder(min, max, typical).
function ladder(min, max, typical) {
  const s = new Set([min, typical, max]);
  for (let p = 16; p < max; p *= 2) {
    if (p > min) s.add(p);
    const h = p + p / 2;
    if (h > min && h < max) s.add(h);
  }
  return [...s].sort((a, b) => a - b);
}

function kilnP50(o, past) {
  const json = path.join(os.tmpdir(), `kiln_decode_${process.pid}.json`);
  execFileSync(o.kiln, ['bench', o.model, '--dim', `past_sequence_length=${past}`, '--dim', 'sequence=1',
                        '--threads', String(o.threads), '--runs', String(o.runs), '--json', json],
               {stdio: ['ignore', 'ignore', 'inherit']});
  return JSON.parse(fs.readFileSync(json, 'utf8')).p50_ms;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const ort = loadOrt('decode_step');
  const session = await ort.InferenceSession.create(o.model, {
    graphOptimizationLevel: 'all', intraOpNumThreads: o.threads, interOpNumThreads: 1});
  // heads and head_dim from the model's declared cache shape [batch, heads, past, head_dim].
  const meta = JSON.parse(execFileSync('/usr/bin/python3', ['-c',
    'import onnx,sys,json; m=onnx.load(sys.argv[1], load_external_data=False);' +
    'd=[i for i in m.graph.input if i.name.startswith("past_key_values")][0].type.tensor_type.shape.dim;' +
    'print(json.dumps([d[1].dim_value, d[3].dim_value]))', o.model]).toString());
  const [heads, headDim] = meta;
  const classes = ladder(1, o.max, Math.min(128, o.max));
  const rows = [];
  for (const past of o.pasts) {
    const cls = classes.find(c => c >= past);
    const feeds = {};
    for (const name of session.inputNames) {
      if (name === 'input_ids') feeds[name] = new ort.Tensor('int64', BigInt64Array.from([5n]), [1, 1]);
      else if (name === 'position_ids') feeds[name] = new ort.Tensor('int64', BigInt64Array.from([BigInt(past)]), [1, 1]);
      else if (name === 'attention_mask') feeds[name] = new ort.Tensor('int64', new BigInt64Array(past + 1).fill(1n), [1, past + 1]);
      else feeds[name] = new ort.Tensor('float32', new Float32Array(heads * past * headDim).map(() => Math.random() - 0.5),
                                        [1, heads, past, headDim]);
    }
    const kilnClass = kilnP50(o, cls);
    const kilnExact = kilnP50(o, past);
    await session.run(feeds);
    const ms = [];
    for (let i = 0; i < o.runs; ++i) {
      const t0 = process.hrtime.bigint();
      await session.run(feeds);
      ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    ms.sort((a, b) => a - b);
    const ort50 = ms[Math.floor(ms.length / 2)];
    rows.push({past, class: cls, kiln_class_p50_ms: kilnClass, kiln_exact_p50_ms: kilnExact, ort_p50_ms: ort50,
               ratio_class_over_ort: kilnClass / ort50});
    console.log(`past ${String(past).padStart(5)} class ${String(cls).padStart(5)}: kiln(class) ${kilnClass.toFixed(2)} ms, ` +
                `kiln(exact) ${kilnExact.toFixed(2)} ms, ort ${ort50.toFixed(2)} ms, kiln(class)/ort ${(kilnClass / ort50).toFixed(2)}`);
    await new Promise(resolve => setTimeout(resolve, 300));  // ORT's pool parks before kiln's turn
  }
  if (o.json) fs.writeFileSync(o.json, JSON.stringify({options: o, rows}, null, 1));
}

main().catch(e => { console.error(e); process.exit(1); });
