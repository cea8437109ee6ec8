// A closed-loop gRPC load client for kilnd (a benchmark tool, not a test): `concurrency`
// threads, each on its own connection, send one-row Predicts back to back for `seconds`
// after a warm-up, and the tool prints one JSON line with throughput and latency
// percentiles. bench/server_latency.sh drives it and writes bench/results/server.md.
//
//   server_latency --target 127.0.0.1:8500 --model resnet18 --concurrency 8 --seconds 5
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kiln/v1/inference.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "server/serving/tensor_codec.h"

namespace kiln::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string target = "127.0.0.1:8500";
  std::string model = "example";
  int concurrency = 1;
  double seconds = 5.0, warmup_seconds = 1.0;
};

bool ParseArgs(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--target") o.target = v;
    else if (k == "--model") o.model = v;
    else if (k == "--concurrency") o.concurrency = std::stoi(v);
    else if (k == "--seconds") o.seconds = std::stod(v);
    else if (k == "--warmup-seconds") o.warmup_seconds = std::stod(v);
    else return false;
  }
  return argc % 2 == 1 && o.concurrency > 0;
}

// One row of seeded random data per model input (dim 0 of a batchable input becomes 1).
bool MakeRequest(const Options& o, v1::PredictRequest& req) {
  auto stub = v1::ModelService::NewStub(
      grpc::CreateChannel(o.target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::GetModelRequest get;
  get.set_name(o.model);
  v1::ModelInfo info;
  if (grpc::Status s = stub->GetModel(&ctx, get, &info); !s.ok()) {
    std::fprintf(stderr, "GetModel %s: %s\n", o.model.c_str(), s.error_message().c_str());
    return false;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-1, 1);
  req.set_model(o.model);
  for (const v1::TensorInfo& in : info.inputs()) {
    std::vector<int64_t> shape(in.shape().begin(), in.shape().end());
    for (int64_t& d : shape) d = d < 0 ? 1 : d;
    // v1::DataType uses ONNX's numbering, as kiln::DType does.
    Tensor t(static_cast<DType>(in.dtype()), shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, dist(rng));
    server::EncodeTensor(t, false, &(*req.mutable_inputs())[in.name()]);
  }
  return true;
}

struct Totals {
  std::vector<double> latencies_us;
  int64_t errors = 0;
};

// Runs one client thread until `end`; records only calls that start after `measure_from`.
void Client(const Options& o, int id, const v1::PredictRequest& req, Clock::time_point measure_from,
            Clock::time_point end, Totals& out) {
  grpc::ChannelArguments args;
  args.SetInt("kiln.bench.client", id);  // a distinct argument gives each thread a connection
  auto stub = v1::InferenceService::NewStub(
      grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args));
  for (Clock::time_point t0 = Clock::now(); t0 < end; t0 = Clock::now()) {
    grpc::ClientContext ctx;
    v1::PredictResponse resp;
    const bool ok = stub->Predict(&ctx, req, &resp).ok();
    if (t0 < measure_from) continue;
    if (!ok) ++out.errors;
    out.latencies_us.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
}

int Main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, o)) {
    std::fprintf(stderr, "usage: server_latency --target HOST:PORT --model NAME "
                         "[--concurrency N] [--seconds S] [--warmup-seconds W]\n");
    return 2;
  }
  v1::PredictRequest req;
  if (!MakeRequest(o, req)) return 1;
  const auto start = Clock::now();
  const auto measure_from = start + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(o.warmup_seconds));
  const auto end = measure_from + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(o.seconds));
  std::vector<Totals> totals(o.concurrency);
  std::vector<std::thread> threads;
  for (int i = 0; i < o.concurrency; ++i) {
    threads.emplace_back(Client, std::cref(o), i, std::cref(req), measure_from, end,
                         std::ref(totals[i]));
  }
  for (auto& t : threads) t.join();
  std::vector<double> all;
  int64_t errors = 0;
  for (const Totals& t : totals) {
    all.insert(all.end(), t.latencies_us.begin(), t.latencies_us.end());
    errors += t.errors;
  }
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all.empty() ? 0.0 : all[static_cast<size_t>(p * (all.size() - 1))]; };
  std::printf("{\"model\":\"%s\",\"concurrency\":%d,\"requests\":%zu,\"errors\":%lld,"
              "\"throughput_rps\":%.1f,\"p50_us\":%.0f,\"p99_us\":%.0f}\n",
              o.model.c_str(), o.concurrency, all.size(), static_cast<long long>(errors),
              all.size() / o.seconds, pct(0.5), pct(0.99));
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) { return kiln::bench::Main(argc, argv); }
