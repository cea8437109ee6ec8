// kiln-load: a load generator for kilnd. Closed loop (-c calls in flight) or open loop (--rps,
// latency from the scheduled time), requests from a JSON file or random per GetModel; prints
// percentiles and writes ghz's JSON report so existing ghz tooling reads the results.
#include <cstdio>
#include <fstream>
#include <iostream>

#include <grpcpp/grpcpp.h>

#include "loadtest/driver.h"
#include "loadtest/generate_driver.h"
#include "loadtest/options.h"
#include "loadtest/report.h"
#include "loadtest/requests.h"

namespace kiln::load {
namespace {

// Writes the JSON report to --json (when given); false, having said why, when it cannot.
bool WriteReport(const Options& options, const std::string& json) {
  if (options.json_file.empty()) return true;
  std::ofstream out(options.json_file);
  out << json;
  if (!out) std::cerr << "kiln-load: cannot write " << options.json_file << "\n";
  return static_cast<bool>(out);
}

// --call generate: warm-up and the measured phase, the reports with the generation figures.
int RunGenerate(const Options& options, const std::shared_ptr<grpc::Channel>& channel) {
  if (options.warmup > 0) {
    if (auto warm = RunGeneration(options, options.warmup, {}, channel); !warm.ok()) {
      std::cerr << "kiln-load: " << warm.status().message() << "\n";
      return 1;
    }
  }
  auto result = RunGeneration(options, options.total, options.duration, channel);
  if (!result.ok()) {
    std::cerr << "kiln-load: " << result.status().message() << "\n";
    return 1;
  }
  FinalizeGeneration(*result);
  std::cout << TextReport(result->run) << GenerationText(*result);
  // ghz's report plus one object of its own: ghz tooling ignores fields it does not know.
  json::Writer w(json::NonFinite::kNull);
  w.BeginObject();
  WriteGhzMembers(w, result->run, options);
  w.Key("generation");
  WriteGeneration(w, *result);
  return WriteReport(options, w.EndObject().Take() + "\n") ? 0 : 1;
}

int Main(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  auto options = ParseOptions(args);
  if (!options.ok()) {
    std::cerr << "kiln-load: " << options.status().message() << "\n\n" << kUsage;
    return 2;
  }
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxSendMessageSize(-1);
  channel_args.SetMaxReceiveMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(options->target, grpc::InsecureChannelCredentials(), channel_args);
  if (options->call == "generate") return RunGenerate(*options, channel);
  auto pool = BuildRequests(*options, channel);
  if (!pool.ok()) {
    std::cerr << "kiln-load: " << pool.status().message() << "\n";
    return 1;
  }
  if (options->warmup > 0) {
    // Warm-up runs the same way, closed loop at the same concurrency, and is thrown away.
    Options warm = *options;
    warm.rps = 0;
    (void)RunPhase(warm, options->warmup, {}, *pool);
  }
  RunResult result = RunPhase(*options, options->total, options->duration, *pool);
  Finalize(result);
  std::cout << TextReport(result);
  return WriteReport(*options, GhzJson(result, *options)) ? 0 : 1;
}

}  // namespace
}  // namespace kiln::load

int main(int argc, char** argv) {
  return kiln::load::Main(std::vector<std::string>(argv + 1, argv + argc));
}
