// int8 calibration in the model's build (`precision: {mode: auto, int8: true}`): the ranges
// (runtime/check/calibrate.h) observed on the reference over the model's shipped samples
// (every test_data_set_* that fits, up to kMaxCalibrationSets) where it has them, else over
// the warm-up check's seeded random rows, which bound random data only (GetModel says which).
#pragma once

#include "base/status.h"
#include "compiler/pipeline.h"
#include "server/model/model_builder.h"
#include "server/model/model_config.h"
#include "server/model/warmup_check.h"

namespace kiln::server {

// Before a compile at precision int8 without ranges: the model's own (a shape's engines take
// the model's, config.precision.calibration), else calibrated on `rows`. Without rows (the
// warm-up check off) int8 cannot be calibrated: the pipeline steps up the precision ladder
// and `check` says why.
absl::Status EnsureCalibration(CheckRows* rows, const ModelConfig& config,
                               PipelineOptions& pipeline, CheckSummary& check, LoadTimes& times);

}  // namespace kiln::server
