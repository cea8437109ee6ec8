#include "server/model/calibration.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/elapsed.h"
#include "base/stop.h"
#include "runtime/check/calibrate.h"
#include "server/model/precision.h"

namespace kiln::server {

absl::Status EnsureCalibration(CheckRows* rows, const ModelConfig& config,
                               PipelineOptions& pipeline, CheckSummary& check, LoadTimes& times) {
  if (!passes::IsInt8Precision(pipeline.precision) || pipeline.calibration) return absl::OkStatus();
  if (config.precision.calibration) {
    pipeline.calibration = config.precision.calibration;
    return absl::OkStatus();
  }
  if (!rows) {
    StepUp(config.device, "int8 needs the warm-up inputs to calibrate on (warmup is off)", pipeline,
           check);
    return absl::OkStatus();
  }
  const auto t0 = std::chrono::steady_clock::now();
  // The shipped samples alone when there are any (a random row would widen the ranges past
  // real data's), else the check's random rows.
  std::vector<const ref::TensorMap*> feeds;
  for (const ref::TensorMap& s : rows->samples) feeds.push_back(&s);
  if (feeds.empty()) {
    ASSIGN_OR_RETURN(const ref::TensorMap* distractor, DistractorOf(*rows));
    feeds = {&rows->feed, distractor};
  }
  std::vector<ref::TensorMap> answers;
  absl::StatusOr<std::shared_ptr<const passes::Calibration>> ranges =
      check::Calibrate(*rows->raw, feeds, &answers);
  times.reference_ms += MsSince(t0);
  if (!ranges.ok()) {
    if (IsStopError(ranges.status())) return ranges.status();
    StepUp(config.device, "int8 calibration failed: " + std::string(ranges.status().message()),
           pipeline, check);
    return absl::OkStatus();
  }
  // Ranges from random rows bound random data only: said where GetModel shows it.
  const std::string on =
      rows->samples.empty()
          ? std::string("the seeded random warm-up rows (ship samples for real ranges)")
          : absl::StrCat(rows->samples.size(), " sample set(s) shipped with the model");
  AddPrecisionNote(check, "int8 calibrated on " + on);
  spdlog::info("precision: int8 calibrated on {} ({} value ranges, {:.0f} ms)", on,
               (*ranges)->size(), MsSince(t0));
  pipeline.calibration = *std::move(ranges);
  // The check's first feed was one of them: its reference answer is not computed again.
  if (rows->samples.empty() && !rows->ran && rows->want.empty()) rows->want = std::move(answers[0]);
  return absl::OkStatus();
}

}  // namespace kiln::server
