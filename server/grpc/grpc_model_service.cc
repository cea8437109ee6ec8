// kiln.v1.ModelService (declared in grpc_services.h).
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/stop.h"
#include "server/common/auth.h"
#include "server/grpc/grpc_services.h"

namespace kiln::server {
namespace {

v1::ModelState ProtoState(ModelState s) {
  switch (s) {
    case ModelState::kLoading:
      return v1::MODEL_STATE_LOADING;
    case ModelState::kReady:
      return v1::MODEL_STATE_READY;
    case ModelState::kFailed:
      return v1::MODEL_STATE_FAILED;
  }
  return v1::MODEL_STATE_UNKNOWN;
}

void FillTensorInfo(const runtime::TensorSpec& s, v1::TensorInfo* out) {
  out->set_name(s.name);
  out->set_dtype(static_cast<v1::DataType>(s.dtype));
  for (int64_t d : s.shape) out->add_shape(d);
}

void FillEngines(const ModelVersion& mv, v1::ModelInfo* out) {
  for (const auto& [batch, instances] : mv.built().engines) {
    const runtime::EngineInfo& info = instances.at(0)->info();
    v1::EngineSummary* e = out->add_engines();
    e->set_device(info.device);
    e->set_batch(batch);
    e->set_instances(static_cast<int32_t>(instances.size()));
    e->set_arena_bytes(info.arena_bytes);
    e->set_weight_bytes(info.weight_bytes);
    e->set_shared_weight_bytes(info.shared_weight_bytes);
    e->set_build_ms(info.build_ms);
    e->set_total_ops(info.total_ops);
    e->set_fallback_ops(info.fallback_ops);
    e->set_layout(info.layout);
    e->set_tune_ms(info.tune_ms);
    e->set_threads(info.threads);
    e->set_max_threads(info.max_threads);
    for (const std::string& t : info.fallback_op_types) e->add_fallback_op_types(t);
    for (const std::string& t : info.slow_ops) e->add_slow_ops(t);
    e->set_isa(info.isa);
  }
}

void FillShapes(const ModelVersion& mv, v1::ModelInfo* out) {
  for (const auto& [name, size] : mv.built().signature.default_dims) {
    (*out->mutable_dynamic_dims())[name] = size;
  }
  for (const auto& [name, range] : mv.built().signature.dim_ranges) {
    v1::DimRange& r = (*out->mutable_dynamic_dim_ranges())[name];
    r.set_min(range.first);
    r.set_max(range.second);
  }
  if (const auto& padding = mv.built().padding) {
    for (const auto& [symbol, sizes] : padding->classes) {
      v1::ShapeClassList& list = (*out->mutable_shape_classes())[symbol];
      for (int64_t n : sizes) list.add_sizes(n);
    }
  }
  out->set_shape_classes_refused(mv.built().padding_refused);
  for (const std::string& b : mv.built().bound_inputs) out->add_bound_inputs(b);
  const ShapeEngines* shapes = mv.shapes();
  if (!shapes) return;
  for (const ShapeSummary& s : shapes->Shapes()) {
    v1::ShapeEngineSummary* e = out->add_shape_engines();
    e->set_dims(s.dims);
    for (int64_t b : s.batches) e->add_batch_sizes(b);
    e->set_build_ms(s.build_ms);
  }
  const ShapeCounters c = shapes->counters();
  v1::ShapeEngineCounters* pc = out->mutable_shape_counters();
  pc->set_hits(c.hits);
  pc->set_misses(c.misses);
  pc->set_evictions(c.evictions);
  pc->set_builds(c.builds);
  pc->set_prebuilt(c.prebuilt);
}

// Watches a call's client while its handler works: `gone()` is set once the client has
// cancelled or its deadline has passed (gRPC cancels the call then), so work polling it
// through a StopScope stops instead of committing what no one waits for.
class ClientWatch {
 public:
  explicit ClientWatch(grpc::ServerContext& ctx)
      : thread_([this, &ctx] {
          std::unique_lock<std::mutex> lk(mu_);
          while (!done_ && !gone_) {
            cv_.wait_for(lk, std::chrono::milliseconds(50));
            if (ctx.IsCancelled()) gone_ = true;
          }
        }) {}
  ~ClientWatch() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  const std::atomic<bool>* gone() const { return &gone_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  std::atomic<bool> gone_{false};
  std::thread thread_;  // last: starts after the members it uses
};

void FillGeneration(const ModelVersion& mv, v1::GenerationInfo* g) {
  const generate::Generator* gen = mv.generator();
  g->set_enabled(gen != nullptr);
  const CacheMaskOutcome& mask = mv.built().cache_mask;
  if (mask.reported()) g->set_cache_mask(mask.ToString());
  if (gen == nullptr) {
    g->set_refused(mv.generation_refused());
    return;
  }
  const generate::GeneratorStats st = gen->stats();
  g->set_max_context(gen->max_context());
  g->set_page_tokens(gen->config().page_tokens);
  g->set_pages_total(st.pages_total);
  g->set_pages_free(st.pages_free);
  g->set_running(st.running);
  g->set_waiting(st.waiting);
  g->set_preemptions(st.preemptions);
  g->set_tokens(st.tokens);
  if (const generate::Tokenizer* t = gen->tokenizer()) g->set_tokenizer_pieces(t->vocab_size());
  g->set_tokenizer_refused(mv.tokenizer_refused());
  g->set_kv_in_place(gen->appends_in_place());
  g->set_steps_in_place(st.steps_in_place);
  g->set_steps_copied(st.steps_copied);
  g->set_prefix_tokens(st.prefix_tokens);
  g->set_pages_cached(st.pages_cached);
  g->set_last_position(mv.last_position());
  g->set_steps_last_position(st.steps_last_position);
  g->set_steps_last_padded(st.steps_last_padded);
  g->set_exact_lengths(mv.exact_lengths());
  g->set_step_buffer_bytes(st.step_buffer_bytes);
}

}  // namespace

void FillModelInfo(const ModelVersion& mv, bool full, v1::ModelInfo* out) {
  out->set_name(mv.name());
  out->set_version(mv.version());
  out->set_state(ProtoState(mv.state()));
  out->set_reason(mv.reason());
  out->set_device(mv.config().device);
  if (mv.state() != ModelState::kReady) return;
  const BuiltModel& b = mv.built();
  for (const auto& s : b.signature.inputs) FillTensorInfo(s, out->add_inputs());
  for (const auto& s : b.signature.outputs) FillTensorInfo(s, out->add_outputs());
  out->set_max_batch_size(b.signature.max_batch_size);
  FillEngines(mv, out);
  FillShapes(mv, out);
  FillGeneration(mv, out->mutable_generation());
  v1::DifferentialCheck* c = out->mutable_check();
  c->set_ran(b.check.ran);
  c->set_ok(b.check.ok);
  c->set_max_abs_err(b.check.max_abs_err);
  c->set_max_rel_err(b.check.max_rel_err);
  c->set_message(b.check.message);
  for (const std::string& p : b.check.disabled_passes) c->add_disabled_passes(p);
  c->set_nonfinite_checked(b.check.nonfinite_checked);
  c->set_nonfinite_ok(b.check.nonfinite_ok);
  c->set_nonfinite_message(b.check.nonfinite_message);
  c->set_precision(b.check.precision);
  c->set_precision_message(b.check.precision_message);
  c->set_norm_rel_err(b.check.norm_rel_err);
  v1::LoadTimes* t = out->mutable_load_times();
  t->set_reference_ms(b.times.reference_ms);
  t->set_compile_ms(b.times.compile_ms);
  t->set_engine_ms(b.times.engine_ms);
  t->set_tune_ms(b.times.tune_ms);
  t->set_check_ms(b.times.check_ms);
  t->set_cache_hits(b.times.cache_hits);
  t->set_import_ms(b.times.import_ms);
  t->set_cache_ms(b.times.cache_ms);
  if (full) out->set_compile_report_json(b.report_json);
}

absl::Status AuthorizeCall(const grpc::ServerContext& ctx, const std::string& token) {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return CheckBearer(token, std::nullopt);
  return CheckBearer(token, std::string_view(it->second.data(), it->second.size()));
}

absl::Status ModelServiceImpl::Authorize(const grpc::ServerContext& ctx) const {
  return AuthorizeCall(ctx, options_.auth_token);
}

// Streams the chunks into `staged` as they come. A client that sends nothing for
// upload_stall_timeout_ms is cancelled (it sees CANCELLED), which frees this thread.
absl::StatusOr<UploadHead> ModelServiceImpl::Receive(grpc::ServerContext& ctx,
                                                     grpc::ServerReader<v1::LoadModelChunk>& reader,
                                                     UploadLimiter::Slot& slot,
                                                     StagedModel& staged) {
  UploadReceiver receiver(options_.uploads, slot, staged);
  StallWatchdog::Watch watch = watchdog_.Start([&ctx] { ctx.TryCancel(); });
  v1::LoadModelChunk chunk;
  while (reader.Read(&chunk)) {
    watch.Touch();
    RETURN_IF_ERROR(receiver.Add(chunk));
  }
  if (watch.fired()) {
    return absl::DeadlineExceededError(absl::StrCat("the upload sent nothing for ",
                                                    options_.uploads.stall_timeout.count(), " ms"));
  }
  if (ctx.IsCancelled()) return absl::CancelledError("the upload was cancelled");
  return receiver.Finish();
}

grpc::Status ModelServiceImpl::LoadModel(grpc::ServerContext* ctx,
                                         grpc::ServerReader<v1::LoadModelChunk>* reader,
                                         v1::LoadModelResponse* resp) {
  auto run = [&]() -> absl::Status {
    RETURN_IF_ERROR(Authorize(*ctx));
    ASSIGN_OR_RETURN(UploadLimiter::Slot slot, limiter_.Acquire());
    ASSIGN_OR_RETURN(std::unique_ptr<StagedModel> staged, registry_.repository().Stage());
    ASSIGN_OR_RETURN(const UploadHead head, Receive(*ctx, *reader, slot, *staged));
    // Builds beside what serves now; files and registry change only once it is READY, and
    // not at all once the client has gone (cancelled, or past its deadline).
    ClientWatch watch(*ctx);
    StopCondition cond;
    cond.deadline = DeadlineOf(*ctx).value_or(StopCondition::Clock::time_point::max());
    cond.cancel = watch.gone();
    cond.what = "the upload";
    const StopScope stop(std::move(cond));
    ASSIGN_OR_RETURN(auto mv,
                     registry_.LoadUpload(head.name, VersionOf(head.version), std::move(staged)));
    FillModelInfo(*mv, true, resp->mutable_model());
    return absl::OkStatus();
  };
  // Staging and streaming errors (a full disk) name files; the client sees them relative.
  return ToGrpcStatus(registry_.repository().RelativePaths(run()));
}

grpc::Status ModelServiceImpl::UnloadModel(grpc::ServerContext* ctx,
                                           const v1::UnloadModelRequest* req,
                                           v1::UnloadModelResponse*) {
  auto run = [&]() -> absl::Status {
    RETURN_IF_ERROR(Authorize(*ctx));
    RETURN_IF_ERROR(ValidateModelName(req->name()));
    return registry_.Unload(req->name(), VersionOf(req->version()), req->delete_from_repository());
  };
  return ToGrpcStatus(run());
}

grpc::Status ModelServiceImpl::ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                                          v1::ListModelsResponse* resp) {
  for (const auto& mv : registry_.List()) FillModelInfo(*mv, false, resp->add_models());
  return grpc::Status::OK;
}

grpc::Status ModelServiceImpl::GetModel(grpc::ServerContext*, const v1::GetModelRequest* req,
                                        v1::ModelInfo* resp) {
  auto mv = registry_.Find(req->name(), VersionOf(req->version()));
  if (!mv.ok()) return ToGrpcStatus(mv.status());
  FillModelInfo(**mv, true, resp);
  return grpc::Status::OK;
}

}  // namespace kiln::server
