#include "server/model_builder.h"

#include "compiler/compile.h"
#include "compiler/shape/infer.h"
#include "runtime/check/differential.h"
#include "runtime/reference/interpreter.h"
#include "server/engine_factory.h"

namespace kiln::server {
namespace {

constexpr int kMaxBisections = 4;  // each disables one pass; more means something else is wrong

check::InputRanges RangesOf(const WarmupConfig& w) {
  check::InputRanges r;
  r.seed = w.seed;
  r.float_lo = w.float_lo;
  r.float_hi = w.float_hi;
  r.int_lo = w.int_lo;
  r.int_hi = w.int_hi;
  r.per_input = w.input_ranges;
  return r;
}

// Runs `engine` on `feed` and compares with `want` (the raw graph's outputs).
absl::StatusOr<check::Divergence> CheckEngine(runtime::Engine& engine, const ref::TensorMap& feed,
                                              const ref::TensorMap& want,
                                              const check::Tolerance& tol) {
  std::vector<Tensor> in, out;
  for (const runtime::TensorSpec& s : engine.inputs()) in.push_back(feed.at(s.name));
  RETURN_IF_ERROR(engine.Run(in, out));
  ref::TensorMap got;
  for (size_t i = 0; i < out.size(); ++i) got.emplace(engine.outputs()[i].name, out[i]);
  return check::CompareOutputs(want, got, tol);
}

struct BucketResult {
  CompiledGraph compiled;
  std::unique_ptr<runtime::Engine> engine;
};

// Compile + build + check for one bucket, bisecting and disabling passes on a mismatch.
// `pipeline.disabled` grows with the passes the bisection names (shared by later buckets).
absl::StatusOr<BucketResult> BuildBucket(const Graph& imported, int64_t batch,
                                         const ModelConfig& config, PipelineOptions& pipeline,
                                         CheckSummary& check) {
  std::unique_ptr<Graph> raw = imported.Clone();
  RETURN_IF_ERROR(shape::Specialize(*raw, batch));
  const check::Tolerance tol{config.warmup.rtol, config.warmup.atol};
  ref::TensorMap feed, want;
  if (config.warmup.enabled) {
    ASSIGN_OR_RETURN(feed, check::RandomInputs(*raw, RangesOf(config.warmup)));
    ASSIGN_OR_RETURN(want, ref::Run(*raw, feed));
  }
  for (int attempt = 0;; ++attempt) {
    BucketResult r;
    ASSIGN_OR_RETURN(r.compiled, CompileGraph(imported, CompileOptions{batch, pipeline, {}}));
    ASSIGN_OR_RETURN(r.engine, BuildEngine(config.device, r.compiled));
    if (!config.warmup.enabled) return r;
    check.ran = true;
    ASSIGN_OR_RETURN(check::Divergence d, CheckEngine(*r.engine, feed, want, tol));
    check.max_abs_err = std::max(check.max_abs_err, d.max_abs_err);
    check.max_rel_err = std::max(check.max_rel_err, d.max_rel_err);
    if (d.ok) return r;
    const std::string where = absl::StrCat("batch ", batch, ": ", d.message);
    ASSIGN_OR_RETURN(check::BisectResult b, check::BisectPipeline(*raw, pipeline, feed, tol));
    if (b.ok || attempt >= kMaxBisections) {
      check.ok = false;
      check.message = absl::StrCat(
          "warm-up check failed on ", config.device, " (", where, ")",
          b.ok ? "; every pass prefix matches the reference, so the engine itself diverges"
               : "; still failing after disabling passes");
      return absl::FailedPreconditionError(check.message);
    }
    pipeline.disabled.insert(b.first_bad_pass);
    check.disabled_passes.insert(b.first_bad_pass);
    check.message = absl::StrCat("disabled pass '", b.first_bad_pass, "' (", where, ")");
  }
}

}  // namespace

absl::StatusOr<ModelSignature> SignatureOf(const Graph& imported, const ModelConfig& config) {
  ModelSignature sig;
  sig.batchable = !imported.inputs.empty();
  for (const Value* v : imported.inputs) {
    if (!v->shape || v->shape->empty() || (*v->shape)[0].known()) sig.batchable = false;
  }
  for (const Value* v : imported.inputs) {
    if (!v->shape) {
      return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "' has no declared rank"));
    }
    runtime::TensorSpec s{v->name, v->dtype, {}};
    for (size_t i = 0; i < v->shape->size(); ++i) {
      const Dim& d = (*v->shape)[i];
      if (i == 0 && sig.batchable) {
        s.shape.push_back(-1);
      } else if (!d.known()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", v->name, "' dim ", i, " is symbolic; only dim 0 (the batch) may be"));
      } else {
        s.shape.push_back(d.value);
      }
    }
    sig.inputs.push_back(std::move(s));
  }
  sig.max_batch_size = sig.batchable ? config.max_batch_size : 1;
  return sig;
}

absl::StatusOr<BuiltModel> BuildModel(const Graph& imported, const ModelConfig& config,
                                      const ProgressFn& progress) {
  BuiltModel m;
  ASSIGN_OR_RETURN(m.signature, SignatureOf(imported, config));
  m.buckets = m.signature.batchable ? config.batch_buckets : std::vector<int64_t>{1};
  PipelineOptions pipeline;
  pipeline.level = config.opt_level;
  pipeline.disabled = config.disabled_passes;
  m.check.ok = true;
  for (int64_t batch : m.buckets) {
    if (progress) progress(absl::StrCat("compiling and checking batch ", batch));
    ASSIGN_OR_RETURN(BucketResult r, BuildBucket(imported, batch, config, pipeline, m.check));
    auto& instances = m.engines[batch];
    for (int i = 1; i < config.instances; ++i) {
      ASSIGN_OR_RETURN(auto extra, BuildEngine(config.device, r.compiled));
      instances.push_back(std::move(extra));
    }
    instances.insert(instances.begin(), std::move(r.engine));
    if (batch == m.buckets.back()) m.report_json = r.compiled.report.ToJson();
  }
  for (const auto& [batch, list] : m.engines) {
    for (size_t i = 0; i < m.signature.inputs.size(); ++i) {
      if (list[0]->inputs().size() != m.signature.inputs.size() ||
          list[0]->inputs()[i].name != m.signature.inputs[i].name) {
        return absl::InternalError("engine inputs are not in the model's input order");
      }
    }
  }
  // Output specs come from the engines (declared output shapes may be unknown before
  // specialization).
  for (runtime::TensorSpec s : m.engines.begin()->second[0]->outputs()) {
    if (m.signature.batchable && !s.shape.empty()) s.shape[0] = -1;
    m.signature.outputs.push_back(std::move(s));
  }
  return m;
}

}  // namespace kiln::server
