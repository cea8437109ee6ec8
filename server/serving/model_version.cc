// ModelVersion: one loaded version's engines, batcher and shape engines (declared in
// server/serving/model_registry.h), from READY until unload.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "base/stop.h"
#include "server/model/mask_positions.h"
#include "server/serving/model_registry.h"
#include "server/serving/request_validation.h"

namespace kiln::server {
namespace {

// A request's own rows of a model whose positions are read from its mask must give its cache's
// length: counted over the first row of an added mask, each row's count must agree
// (cache_mask.h); from the extent of a model's own mask, the rows read (each, or the first)
// must hold their last cached position (mask_positions.h). A generation step's rows are
// grouped and padded so by the loop.
absl::Status CheckRowsGiveTheirPositions(const BuiltModel& b, const std::vector<Tensor>& inputs,
                                         const DimValues& dims, const RunHints& hints) {
  if (hints.run_now) return absl::OkStatus();
  const CacheMaskOutcome& m = b.cache_mask;
  auto past = dims.find(m.past_symbol);
  for (size_t k = 0; k < inputs.size() && k < b.signature.inputs.size(); ++k) {
    if (b.signature.inputs[k].name == m.mask && past != dims.end()) {
      return m.positions_from_mask
                 ? CheckLastCachedReal(inputs[k], past->second, !m.rows_share_length)
                 : CheckRowsShareLength(inputs[k], past->second);
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* ModelStateName(ModelState s) {
  switch (s) {
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kReady:
      return "READY";
    case ModelState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

ModelVersion::~ModelVersion() {
  if (generator_) generator_->Stop();
  if (batcher_) batcher_->Stop();
  if (last_shapes_) last_shapes_->Stop();
  if (shapes_) shapes_->Stop();
}

std::string ModelVersion::reason() const {
  std::lock_guard<std::mutex> lk(reason_mu_);
  return reason_;
}

void ModelVersion::SetReason(const std::string& r) {
  std::lock_guard<std::mutex> lk(reason_mu_);
  reason_ = r;
}

void ModelVersion::Fail(const std::string& reason) {
  SetReason(reason);
  state_ = ModelState::kFailed;
}

absl::Status ModelVersion::Start(BuiltModel built, std::shared_ptr<const Graph> graph) {
  built_ = std::move(built);
  BatchPolicy policy;
  policy.buckets = built_.buckets;
  policy.batchable = built_.signature.batchable;
  policy.max_queue_delay = std::chrono::microseconds(config_.max_queue_delay_us);
  policy.max_queue_size = static_cast<size_t>(config_.max_queue_size);
  policy.model = name_;
  // gRPC handler threads wait for their result anyway: at low load they run it themselves.
  policy.inline_when_idle = true;
  stats_ = std::make_unique<ModelStats>(built_.buckets);
  policy.stats = stats_.get();
  policy_ = policy;
  // Worker w owns instance w of every bucket's engines, so no engine runs two batches at once.
  auto engine_for = [this](int worker, const std::vector<Tensor>& in) -> runtime::Engine* {
    const int64_t bucket = built_.signature.batchable ? in.at(0).dim(0) : built_.buckets[0];
    auto it = built_.engines.find(bucket);
    return it == built_.engines.end() ? nullptr : it->second.at(worker).get();
  };
  auto run = [engine_for](int worker, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    runtime::Engine* e = engine_for(worker, in);
    return e ? e->Run(in, out) : absl::InternalError("no engine for the batch size");
  };
  auto run_appending = [engine_for](int worker, const std::vector<Tensor>& in,
                                    std::vector<Tensor>& out) {
    runtime::Engine* e = engine_for(worker, in);
    return e ? e->RunAppending(in, out) : absl::InternalError("no engine for the batch size");
  };
  if (built_.signature.dynamic()) {
    if (!graph) return absl::InternalError("a dynamic model needs its graph to build shapes");
    graph_ = std::move(graph);
    auto build = [this](const DimValues& dims, int64_t bucket, bool check) {
      return BuildShapeEngines(*graph_, config_, built_, dims, bucket, check);
    };
    size_t capacity = static_cast<size_t>(config_.max_shape_engines);
    if (built_.padding) capacity = std::max(capacity, AllClasses(built_.padding->classes).size());
    ASSIGN_OR_RETURN(shapes_, ShapeEngines::Create(policy, capacity, build, config_.instances));
    if (built_.padding) RETURN_IF_ERROR(BuildShapeClasses());
  }
  ASSIGN_OR_RETURN(batcher_, Batcher::Create(policy, config_.instances, run, run_appending));
  RETURN_IF_ERROR(StartGeneration());
  SetReason("");
  state_ = ModelState::kReady;
  return absl::OkStatus();
}

absl::Status ModelVersion::CheckReady() const {
  if (state() == ModelState::kReady && batcher_) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("model '", name_, "' version ", version_, " is ", ModelStateName(state())));
}

absl::StatusOr<std::future<Batcher::Result>> ModelVersion::Submit(
    std::vector<Tensor> inputs, int64_t rows, std::optional<Clock::time_point> deadline,
    AbandonFlag abandoned, RunHints hints) {
  RETURN_IF_ERROR(CheckReady());  // before reading shapes_, which Start writes
  DimValues dims;
  if (shapes_) {
    ASSIGN_OR_RETURN(dims, DynamicDimValues(built_.signature, inputs));
  }
  return Route(std::move(inputs), rows, std::move(dims), deadline, std::move(abandoned),
               std::move(hints));
}

absl::StatusOr<std::future<Batcher::Result>> ModelVersion::Submit(
    ValidatedInputs in, std::optional<Clock::time_point> deadline, AbandonFlag abandoned) {
  RETURN_IF_ERROR(CheckReady());     // before reading shapes_, which Start writes
  if (shapes_ && in.dims.empty()) {  // not from the validator: compute them
    ASSIGN_OR_RETURN(in.dims, DynamicDimValues(built_.signature, in.tensors));
  }
  return Route(std::move(in.tensors), in.rows, std::move(in.dims), deadline, std::move(abandoned));
}

absl::StatusOr<std::future<Batcher::Result>> ModelVersion::Route(
    std::vector<Tensor> inputs, int64_t rows, DimValues dims,
    std::optional<Clock::time_point> deadline, AbandonFlag abandoned, RunHints hints) {
  RowFinish finish;
  // Positions that follow the first row's mask: rows of another request (another cache
  // length, padded to the same class) must not join it. Positions read from the mask: a
  // request's own rows must give them (a generation step's do: the loop groups them so, and
  // pads with rows after them).
  const CacheMaskOutcome& mask = built_.cache_mask;
  if (mask.rows_share_length) hints.alone = true;
  if (mask.rows_share_length || mask.positions_from_mask) {
    RETURN_IF_ERROR(CheckRowsGiveTheirPositions(built_, inputs, dims, hints));
  }
  if (shapes_) {
    // Validation has checked the sizes; requests at the warm-up sizes take the model's own
    // engines, any other shape its specialised ones (padded to its class first when the
    // model is served by classes).
    if (built_.padding) {
      ASSIGN_OR_RETURN(DimValues cls, ClassOf(built_.padding->classes, dims));
      if (cls != dims) {
        ASSIGN_OR_RETURN(inputs,
                         ResizeToDims(std::move(inputs), built_.padding->inputs, dims, cls));
        finish = [outputs = &built_.padding->outputs, dims, cls](std::vector<Tensor>& out) {
          ASSIGN_OR_RETURN(out, ResizeToDims(std::move(out), *outputs, cls, dims));
          return absl::OkStatus();
        };
      }
      dims = std::move(cls);
    }
    if (dims != built_.signature.default_dims) {
      return shapes_->Enqueue(dims, std::move(inputs), rows, deadline, std::move(abandoned),
                              std::move(finish), std::move(hints));
    }
  }
  return batcher_->Enqueue(std::move(inputs), rows, deadline, std::move(abandoned),
                           std::move(finish), std::move(hints));
}

absl::Status ModelVersion::BuildShapeClasses() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<DimValues> classes = AllClasses(built_.padding->classes);
  // A dynamic dim of one size (no classes) keeps it: the key a request's class has.
  for (DimValues& c : classes) {
    for (const auto& [symbol, size] : built_.signature.default_dims) c.emplace(symbol, size);
  }
  // The check proves the range at its ends and one class inside (seeded, so a reload
  // checks the same one) at the smallest bucket; the typical size's engines were checked
  // with the model. Every other class and bucket is built by the same compiler and backend.
  std::set<size_t> checked{0, classes.size() - 1};
  if (classes.size() > 2) {
    checked.insert(1 + std::hash<std::string>{}(name_) % (classes.size() - 2));
  }
  for (size_t i = 0; i < classes.size(); ++i) {
    if (classes[i] == built_.signature.default_dims) continue;
    for (int64_t bucket : built_.buckets) {
      RETURN_IF_ERROR(CheckStop());
      const bool check =
          config_.warmup.enabled && checked.count(i) && bucket == built_.buckets.front();
      RETURN_IF_ERROR(shapes_->Prebuild(classes[i], bucket, check));
    }
  }
  built_.times.classes_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("model {} version {}: shape classes {} ({} engines) built in {:.0f} ms", name_,
               version_, built_.padding->ToString(), shapes_->counters().prebuilt,
               built_.times.classes_ms);
  return absl::OkStatus();
}

}  // namespace kiln::server
