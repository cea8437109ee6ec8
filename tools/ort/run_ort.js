#!/usr/bin/env node
// run_ort.js: runs an ONNX model with ONNX Runtime (onnxruntime-node, CPU) on raw tensors.
//
//   node tools/ort/run_ort.js --model M.onnx --inputs IN.json --out-dir DIR
//                             [--threads N] [--opt all|extended|basic|disabled]
//
// IN.json: {"inputs": [{"name", "dtype", "shape", "file"}]}: each file holds the tensor's raw
// little-endian bytes (row-major); a relative file is taken from IN.json's folder. dtype is a
// numpy name (float32, float64, float16, int8..int64, uint8..uint64, bool).
// Writes DIR/output_K.bin (raw bytes) and DIR/outputs.json: {"outputs": [{"name", "dtype",
// "shape", "file"}]} in the session's output order, plus the ORT version.
// Exit codes: 0 ok, 1 ORT failed, 2 usage, 77 onnxruntime-node is not installed.
'use strict';
const fs = require('fs');
const path = require('path');

const DTYPES = {
  // numpy name -> [ORT tensor type, TypedArray]
  float32: ['float32', Float32Array],
  float64: ['float64', Float64Array],
  float16: ['float16', Uint16Array],
  int8: ['int8', Int8Array],
  int16: ['int16', Int16Array],
  int32: ['int32', Int32Array],
  int64: ['int64', BigInt64Array],
  uint8: ['uint8', Uint8Array],
  uint16: ['uint16', Uint16Array],
  uint32: ['uint32', Uint32Array],
  uint64: ['uint64', BigUint64Array],
  bool: ['bool', Uint8Array],
};
const ORT_TO_NUMPY = Object.fromEntries(Object.entries(DTYPES).map(([np, [o]]) => [o, np]));

function fail(msg, code) {
  process.stderr.write(`run_ort: ${msg}\n`);
  process.exit(code);
}

function parseArgs(argv) {
  const o = {threads: 2, opt: 'all'};
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) fail(`${a} needs a value`, 2);
      return argv[++i];
    };
    if (a === '--model') o.model = next();
    else if (a === '--inputs') o.inputs = next();
    else if (a === '--out-dir') o.outDir = next();
    else if (a === '--threads') o.threads = parseInt(next(), 10);
    else if (a === '--opt') o.opt = next();
    else if (a === '-h' || a === '--help') {
      process.stdout.write(fs.readFileSync(__filename, 'utf8').split('\n').slice(1, 12)
                               .map((l) => l.replace(/^\/\/ ?/, '')).join('\n') + '\n');
      process.exit(0);
    } else fail(`unknown argument ${a}`, 2);
  }
  if (!o.model || !o.inputs || !o.outDir) fail('--model, --inputs and --out-dir are required', 2);
  return o;
}

function loadOrt() {
  // The project installs the package beside this script (scripts/install-deps.sh).
  try {
    return require(path.join(__dirname, 'node_modules', 'onnxruntime-node'));
  } catch (e) {
    try {
      return require('onnxruntime-node');
    } catch (e2) {
      fail(`onnxruntime-node is not installed (run scripts/install-deps.sh): ${e.message}`, 77);
    }
  }
}

function readInput(spec, baseDir) {
  const dt = DTYPES[spec.dtype];
  if (!dt) fail(`input '${spec.name}': unsupported dtype ${spec.dtype}`, 2);
  const file = path.isAbsolute(spec.file) ? spec.file : path.join(baseDir, spec.file);
  const buf = fs.readFileSync(file);
  const count = spec.shape.reduce((a, b) => a * b, 1);
  const Arr = dt[1];
  if (buf.length !== count * Arr.BYTES_PER_ELEMENT) {
    fail(`input '${spec.name}': ${file} has ${buf.length} bytes, shape [${spec.shape}] of ` +
         `${spec.dtype} needs ${count * Arr.BYTES_PER_ELEMENT}`, 2);
  }
  // Copy into an aligned buffer (Buffer slices may be unaligned for 8-byte types).
  const data = new Arr(count);
  new Uint8Array(data.buffer).set(buf);
  return [dt[0], data];
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const ort = loadOrt();
  const spec = JSON.parse(fs.readFileSync(o.inputs, 'utf8'));
  const baseDir = path.dirname(path.resolve(o.inputs));
  const session = await ort.InferenceSession.create(o.model, {
    graphOptimizationLevel: o.opt,
    intraOpNumThreads: o.threads,
    interOpNumThreads: 1,
    executionProviders: ['cpu'],
  });
  const feeds = {};
  for (const s of spec.inputs) {
    const [type, data] = readInput(s, baseDir);
    feeds[s.name] = new ort.Tensor(type, data, s.shape);
  }
  const t0 = process.hrtime.bigint();
  const results = await session.run(feeds);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  fs.mkdirSync(o.outDir, {recursive: true});
  const outputs = [];
  session.outputNames.forEach((name, k) => {
    const t = results[name];
    const np = ORT_TO_NUMPY[t.type];
    if (!np) fail(`output '${name}': unsupported ORT type ${t.type}`, 1);
    const file = `output_${k}.bin`;
    const d = t.data;
    fs.writeFileSync(path.join(o.outDir, file), Buffer.from(d.buffer, d.byteOffset, d.byteLength));
    outputs.push({name, dtype: np, shape: t.dims.map(Number), file});
  });
  const version = (ort.env && ort.env.versions && ort.env.versions.common) || 'unknown';
  fs.writeFileSync(path.join(o.outDir, 'outputs.json'),
                   JSON.stringify({ort_version: version, run_ms: ms, outputs}, null, 1) + '\n');
}

main().catch((e) => fail(`ONNX Runtime failed: ${e && e.stack ? e.stack : e}`, 1));
