#!/usr/bin/env node
// compare_ort.js: Kiln's CPU engine vs ONNX Runtime (onnxruntime-node) on the same models,
// interleaved so both see the same machine state.
//
//   node bench/compare_ort.js --kiln build/tools/kiln[,other/kiln] [--models DIR] [--batches 1,8]
//                             [--threads 2] [--rounds 4] [--runs 10] [--only m1,m2] [--with-o0]
//                             [--dim NAME=N ...] [--json FILE] [--max-noise 1.5] [--retries 3]
//
// For every model folder under DIR (default ~/.cache/kiln/models) and batch: `rounds`
// rounds, each running `kiln bench --runs R` (its own warm-up) and R timed ORT runs (after
// one warm-up session run), in alternating order (even rounds Kiln first, odd rounds ORT
// first) so neither side always runs on the machine the other left. A round in which either
// side's p99/p50 exceeds --max-noise is noise, not a measurement: it is run again, up to
// --retries times per row (a row that still has one says `noisy`). The kept rounds' times are
// pooled: p50/p99 per side and the ratio Kiln/ORT, with the spread of the per-round ratios
// (min-max) and the re-runs. ORT: graphOptimizationLevel 'all', intraOpNumThreads T.
// Several comma-separated kiln binaries (a baseline and a change) run in the same rounds, one
// after another, so their ratios share the machine state: one row per binary. An entry may
// carry extra `kiln bench` flags after a space ("build/tools/kiln --layout blocked").
// --with-o0 adds, for every entry, a row at -O0: what the optimizer's passes buy.
// --dim gives a symbolic input dim other than the batch a size (a text model's sequence), on
// both sides (`kiln bench --dim`); unnamed or unlisted ones are 1.
// --json FILE writes every row, with what kiln bench reported of its engine (ISA, layout,
// fallback and slow ops, layout reorders, build and tuning time); a model either side fails
// on is a row with its error, and the run goes on.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const {execFileSync} = require('child_process');

function parseArgs(argv) {
  const o = {models: path.join(os.homedir(), '.cache/kiln/models'), batches: [1, 8], threads: 2,
             rounds: 4, runs: 10, only: null, settleMs: 300, dims: {}, maxNoise: 1.5, retries: 3};
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i], v = argv[i + 1];
    if (a === '--with-o0') { o.withO0 = true; continue; }
    if (a === '--kiln') o.kiln = v.split(',');
    else if (a === '--models') o.models = v;
    else if (a === '--batches') o.batches = v.split(',').map(Number);
    else if (a === '--threads') o.threads = Number(v);
    else if (a === '--rounds') o.rounds = Number(v);
    else if (a === '--runs') o.runs = Number(v);
    else if (a === '--only') o.only = v.split(',');
    else if (a === '--json') o.json = v;
    else if (a === '--max-noise') o.maxNoise = Number(v);
    else if (a === '--retries') o.retries = Number(v);
    else if (a === '--dim') {
      const [name, size] = v.split('=');
      if (!name || !(Number(size) > 0)) { process.stderr.write(`--dim takes NAME=N, got ${v}\n`); process.exit(2); }
      o.dims[name] = Number(size);
    }
    else { process.stderr.write(`unknown argument ${a}\n`); process.exit(2); }
    ++i;
  }
  if (!o.kiln) { process.stderr.write('--kiln is required\n'); process.exit(2); }
  if (o.withO0) o.kiln = o.kiln.flatMap((k) => [k, `${k} --opt O0`]);
  return o;
}

function percentile(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.round(p * (s.length - 1)))];
}

// Random feeds for every input, symbolic dim 0 bound to the batch, named ones to their --dim
// size, others to 1.
function makeFeeds(ort, session, batch, dims) {
  const feeds = {};
  for (const meta of session.inputMetadata) {
    const shape = meta.shape.map((d, i) => (typeof d === 'number' && d > 0 ? d
                                            : (i === 0 ? batch : (dims[d] || 1))));
    if (typeof meta.shape[0] === 'number' && meta.shape[0] > 0) shape[0] = meta.shape[0];
    const n = shape.reduce((a, b) => a * b, 1);
    if (meta.type === 'int64') {
      feeds[meta.name] = new ort.Tensor('int64', BigInt64Array.from({length: n}, (_, i) => BigInt(i % 10)), shape);
    } else {
      feeds[meta.name] = new ort.Tensor('float32', Float32Array.from({length: n}, () => Math.random() * 2 - 1), shape);
    }
  }
  return feeds;
}

async function timeOrt(session, feeds, runs) {
  const times = [];
  for (let i = 0; i < runs; ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return times;
}

function timeKiln(o, kiln, model, batch, report) {
  const json = path.join(os.tmpdir(), `kiln_bench_${process.pid}.json`);
  // Each side waits the way it does by default: kiln's bounded OpenMP spin
  // (base/openmp_env.h), ORT's intra-op spinning (allow_spinning 1, its default).
  const [bin, ...extra] = kiln.split(' ');
  const dimArgs = Object.entries(o.dims).flatMap(([k, v]) => ['--dim', `${k}=${v}`]);
  execFileSync(bin, ['bench', model, ...dimArgs, '--batch', String(batch), '--threads', String(o.threads),
                     '--runs', String(o.runs), '--json', json, ...extra],
               {stdio: ['ignore', 'ignore', 'inherit']});
  const r = JSON.parse(fs.readFileSync(json, 'utf8'));
  if (report) Object.assign(report, r);
  return r.times_ms;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const ort = require(path.join(__dirname, '..', 'tools', 'ort', 'node_modules', 'onnxruntime-node'));
  const names = fs.readdirSync(o.models).filter((m) => fs.existsSync(path.join(o.models, m, 'model.onnx')))
                  .filter((m) => !o.only || o.only.includes(m)).sort();
  console.log('model           batch  kiln_p50  kiln_p99   ort_p50   ort_p99  kiln/ort     spread  reruns');
  const rows = [];
  for (const m of names) {
    try {
      await benchModel(o, ort, m, rows);
    } catch (e) {
      const msg = String(e.message || e).split('\n')[0];
      console.log(`${m.padEnd(15)} error: ${msg}`);
      rows.push({model: m, error: msg});
    }
    if (o.json) fs.writeFileSync(o.json, JSON.stringify({rows}, null, 1) + '\n');
  }
}

async function benchModel(o, ort, m, rows) {
  const model = path.join(o.models, m, 'model.onnx');
  const session = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: 'all', intraOpNumThreads: o.threads, interOpNumThreads: 1,
    executionMode: 'sequential'});
  for (const batch of o.batches) {
    const feeds = makeFeeds(ort, session, batch, o.dims);
    await timeOrt(session, feeds, 3);  // warm-up
    const kiln = o.kiln.map(() => []), ortTimes = [];
    const reports = o.kiln.map(() => ({}));
    const roundRatios = o.kiln.map(() => []);
    let reruns = 0, noisy = false;
    for (let r = 0; r < o.rounds; ++r) {
      const round = await measureRound(o, session, feeds, model, batch, reports, r % 2 === 1);
      const sides = [...round.kiln, round.ort];
      if (sides.some((xs) => percentile(xs, 0.99) > o.maxNoise * percentile(xs, 0.5))) {
        if (reruns < o.retries) { ++reruns; --r; continue; }
        noisy = true;  // kept: the retries are spent
      }
      round.kiln.forEach((times, i) => {
        kiln[i].push(...times);
        roundRatios[i].push(percentile(times, 0.5) / percentile(round.ort, 0.5));
      });
      ortTimes.push(...round.ort);
    }
    const o50 = percentile(ortTimes, 0.5);
    kiln.forEach((times, i) => {
      const k50 = percentile(times, 0.5);
      const spread = [Math.min(...roundRatios[i]), Math.max(...roundRatios[i])];
      const tag = o.kiln.length > 1 ? `  ${o.kiln[i]}` : '';
      console.log(`${m.padEnd(15)} ${String(batch).padStart(5)} ${k50.toFixed(2).padStart(9)} ` +
                  `${percentile(times, 0.99).toFixed(2).padStart(9)} ${o50.toFixed(2).padStart(9)} ` +
                  `${percentile(ortTimes, 0.99).toFixed(2).padStart(9)} ${(k50 / o50).toFixed(2).padStart(9)} ` +
                  `${(spread[0].toFixed(2) + '-' + spread[1].toFixed(2)).padStart(10)} ` +
                  `${String(reruns).padStart(7)}${noisy ? ' noisy' : ''}${tag}`);
      const rep = reports[i];
      delete rep.times_ms;
      rows.push({model: m, batch, kiln: o.kiln[i], kiln_p50: k50, kiln_p99: percentile(times, 0.99),
                 ort_p50: o50, ort_p99: percentile(ortTimes, 0.99), ratio: k50 / o50,
                 round_ratios: roundRatios[i], spread, reruns, noisy, engine: rep});
    });
  }
}

// One round: every kiln binary's `kiln bench` and ORT's timed runs, ORT first when
// `ortFirst`. ORT's pool spins for a while after a run: it is let park before Kiln's turn,
// or Kiln would be timed beside a busy core.
async function measureRound(o, session, feeds, model, batch, reports, ortFirst) {
  const settle = () => new Promise((resolve) => setTimeout(resolve, o.settleMs));
  const round = {kiln: [], ort: []};
  if (ortFirst) { round.ort = await timeOrt(session, feeds, o.runs); await settle(); }
  round.kiln = o.kiln.map((bin, i) => timeKiln(o, bin, model, batch, reports[i]));
  if (!ortFirst) round.ort = await timeOrt(session, feeds, o.runs);
  await settle();
  return round;
}

main().catch((e) => { process.stderr.write(`compare_ort: ${e.stack || e}\n`); process.exit(1); });
