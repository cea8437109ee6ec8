// quantize_int8: post-training static quantization of a float model (what TensorRT's int8
// calibration and ONNX Runtime's quantize_static do), written as the QDQ form fuse_qdq then
// lowers to integer kernels. Runs only when the compile asks for precision "int8"
// (PipelineOptions::precision, kilnd's `precision: {mode: auto, int8: true}`), with the
// activation ranges a calibration observed on the reference (`Calibration`: each float
// value's min and max over the warm-up inputs, by value name).
//
// For every Conv whose weights are a constant float32 tensor and every MatMul whose second
// operand is a constant float32 [K, N] matrix (a linear layer; a Gemm computing a * B + C with
// constant B and C is rewritten as that MatMul and an Add, its product's range bounded from
// the result's as y - C), in graph order:
//  - the activation input is read through QuantizeLinear -> DequantizeLinear (uint8,
//    asymmetric, per tensor: scale = (max - min) / 255 over a range widened to include 0,
//    zero point = round(-min / scale)); an input already produced by a DequantizeLinear (an
//    earlier product's output, or the model's own QDQ) is used as it is;
//  - the weights become int8, symmetric, per output channel (Conv: axis 0; MatMul: column,
//    axis 1), scale = max |w| / 127, behind a DequantizeLinear; the float constant stays for
//    any other reader;
//  - the result is quantized where fuse_qdq looks for it: after the Relu or Clip that is the
//    product's only reader (its range then starts at 0, so the clamp is implied), else right
//    after the product, and every reader of it reads the dequantized value.
// A MaxPool reading a dequantized value gets its output quantized with the same scale and zero
// point (exact: the max of dequantized values is one of them), so it runs on the bytes.
// Leaves in float: the products whose result reaches a graph output through no other product
// (a classifier head, a last projection: its quantization would round the answer itself, by a
// percent of the logits' range), products whose activation or result has no finite range in
// the calibration, a result that is a graph output, products with non-float32 operands, biases
// that are not constant, and every other op (the Adds of a residual, Softmax, LayerNorm...).
// Not exact by design: the warm-up check bounds the error against the float reference within
// the model's precision budget, and the server falls back to bf16 or float32 beyond it.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "compiler/passes/pass.h"

namespace kiln::passes {

struct ValueRange {
  float lo = 0, hi = 0;
  // The mean of the squared values seen (the signal power a quantization step's noise is
  // measured against); 0: not observed.
  double mean_sq = 0;
};
// A float value's observed range, by value name.
using Calibration = std::map<std::string, ValueRange>;

// "int8" quantizes every product it can; "int8-mixed" keeps the noisiest ones in float
// (`noise_kept` below), for a model that int8 takes over its precision budget.
inline bool IsInt8Precision(const std::string& p) { return p == "int8" || p == "int8-mixed"; }

// `cache` (optional): the quantized weights derived once per model and shared by its
// buckets' compiles (fold_cache.h), so their engines also share one prepacked copy.
// `noise_kept` < 1 ("int8-mixed"): each candidate product's quantization noise is estimated
// from the calibration (a uniform quantizer's step^2 / 12 against the mean square of its
// activation, and of its result), and the noisiest products stay float until those that are
// quantized carry at most `noise_kept` of the total: per-layer precision, the sensitive
// layers in float.
absl::StatusOr<bool> QuantizeInt8(Graph& graph, const Calibration& ranges,
                                  FoldCache* cache = nullptr, double noise_kept = 1.0);

class QuantizeInt8Pass : public Pass {
 public:
  explicit QuantizeInt8Pass(std::shared_ptr<const Calibration> ranges, double noise_kept = 1.0)
      : ranges_(std::move(ranges)), noise_kept_(noise_kept) {}
  std::string name() const override { return "quantize_int8"; }
  void ShareFolds(std::shared_ptr<FoldCache> cache) override { cache_ = std::move(cache); }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override;

 private:
  std::shared_ptr<const Calibration> ranges_;
  double noise_kept_;
  std::shared_ptr<FoldCache> cache_;
};

}  // namespace kiln::passes
