// onnxruntime-node for the bench scripts, from tools/ort (`npm ci` there) or bench/tools;
// exits 77 (skip) naming `who` when it is not installed.
'use strict';
const path = require('path');

function loadOrt(who) {
  for (const dir of [path.join(__dirname, '../../tools/ort/node_modules'), path.join(__dirname, 'node_modules')]) {
    try { return require(path.join(dir, 'onnxruntime-node')); } catch (e) { /* next */ }
  }
  console.error(`${who}: SKIP: onnxruntime-node is not installed (tools/ort: npm ci)`);
  process.exit(77);
}

module.exports = {loadOrt};
