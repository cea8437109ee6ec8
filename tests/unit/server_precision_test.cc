// `precision: {mode: auto}`: the config keys and their errors, and the build's decision: a
// budget the bf16 engine meets serves bf16 (where the CPU multiplies bf16 natively), one it
// exceeds falls back to float32 with the measured errors said, and a CPU without native bf16
// says so and serves float32.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "compiler/onnx/tensor_proto.h"
#include "ir/builder.h"
#include "runtime/cpu/isa.h"
#include "server/model/engine_cache.h"
#include "server/model/engine_factory.h"
#include "server/model/model_builder.h"
#include "server/model/model_config.h"
#include "server/model/precision.h"
#include "server/model/precision_speed.h"
#include "tests/unit/info_engine.h"
#include "tests/unit/test_tensors.h"

namespace kiln::server {
namespace {

TEST(PrecisionConfig, ParsesModeAndBudgetAndRefusesTheRest) {
  absl::StatusOr<ModelConfig> c =
      ParseModelConfig("precision: {mode: auto, max_abs_error: 0.02, max_rel_error: 0.03}\n", {}, "t");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->precision.mode, "auto");
  EXPECT_EQ(c->precision.max_abs_error, 0.02);
  EXPECT_EQ(c->precision.max_rel_error, 0.03);
  EXPECT_EQ(ModelConfig().precision.mode, "float32");  // exact by default
  EXPECT_EQ(c->precision.prefer, "fastest");
  c = ParseModelConfig("precision: {mode: auto, prefer: lowest}\n", {}, "t");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->precision.prefer, "lowest");
  EXPECT_FALSE(c->precision.int8);  // int8 only when asked for
  c = ParseModelConfig("precision: {mode: auto, int8: true}\n", {}, "t");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->precision.int8);
  for (const char* bad :
       {"precision: {mode: fast}\n", "precision: {max_abs_error: -1}\n",
        "precision: {int8: sometimes}\n", "precision: {prefer: smallest}\n",
        "precision: {max_rel_error: .nan}\n", "precision: {budget: 1}\n", "precision: auto\n"}) {
    absl::StatusOr<ModelConfig> r = ParseModelConfig(bad, {}, "t");
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("precision"), std::string::npos) << r.status();
    }
  }
}

Tensor Wave(std::vector<int64_t> shape, double seed) {
  return testing::SeededUniform(std::move(shape), static_cast<uint64_t>(seed * 1e6));
}

std::unique_ptr<Graph> TwoLayers() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("batch"), Dim(64)});
  Value* h = b.Op("Relu", {b.Op("MatMul", {x, b.Constant("w1", Wave({64, 128}, 0.37))})});
  b.Output(b.Op("MatMul", {h, b.Constant("w2", Wave({128, 32}, 0.23))}));
  return b.Build();
}

// x -> MatMul -> Relu -> { MatMul (an outlier column) -> Mul 1e-4 (a layer scale), MatMul }
// -> Add -> MatMul (the head) -> out: the scaled branch's rounding is locally the largest,
// the other branch's is what the output feels.
std::unique_ptr<Graph> Branches() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("batch"), Dim(64)});
  Value* h = b.Op("Relu", {b.Op("MatMul", {x, b.Constant("wa", Wave({64, 64}, 0.41))})});
  Tensor wq = Wave({64, 64}, 0.43);
  for (int64_t i = 0; i < 64; ++i) wq.mutable_data<float>()[i * 64] *= 50;
  Value* quiet = b.Op("MatMul", {h, b.Constant("wq", wq)});
  Value* scaled = b.Op("Mul", {quiet, b.Constant("scale", Tensor::Scalar(DType::kFloat32, 1e-4f))});
  Value* loud = b.Op("MatMul", {h, b.Constant("wl", Wave({64, 64}, 0.47))});
  Value* sum = b.Op("Add", {scaled, loud});
  b.Output(b.Op("MatMul", {sum, b.Constant("head", Wave({64, 16}, 0.53))}));
  return b.Build();
}

BuiltModel Build(double budget, const char* prefer = "lowest", bool int8 = false,
                 bool warmup = true, const std::string& samples_dir = "",
                 std::unique_ptr<Graph> (*model)() = TwoLayers, EngineCache* cache = nullptr) {
  ModelConfig config;
  config.warmup.samples_dir = samples_dir;
  config.max_batch_size = 2;
  config.precision.mode = "auto";
  config.precision.int8 = int8;
  config.warmup.enabled = warmup;
  config.precision.prefer = prefer;
  config.precision.max_abs_error = config.precision.max_rel_error = budget;
  EXPECT_TRUE(FinalizeModelConfig(config).ok());
  absl::StatusOr<BuiltModel> built =
      BuildModel(*model(), config, nullptr, CacheContext{cache, "precision-test-model"});
  EXPECT_TRUE(built.ok()) << built.status();
  return built.ok() ? std::move(*built) : BuiltModel{};
}

TEST(PrecisionAuto, ServesBf16WithinTheBudgetAndFloat32Beyond) {
  BuiltModel loose = Build(0.05);
  BuiltModel tight = Build(1e-7);
  EXPECT_TRUE(loose.check.ok && tight.check.ok);
  if (!cpu::HasBf16DotProduct()) {
    EXPECT_EQ(loose.check.precision, "float32");
    EXPECT_NE(loose.check.precision_message.find("no lower precision"), std::string::npos)
        << loose.check.precision_message;
    GTEST_SKIP() << "this CPU (at the ISA level in force) has no native bf16 products";
  }
  EXPECT_EQ(loose.check.precision, "bf16") << loose.check.precision_message;
  EXPECT_GT(loose.check.max_abs_err, 0.0);  // the lowered engines' measured error
  EXPECT_GT(loose.check.norm_rel_err, 0.0);
  EXPECT_LE(loose.check.norm_rel_err, 0.05);
  // The ladder: bf16, then bf16 with the score projections in float32 (none here), then
  // float32, each step said.
  EXPECT_NE(tight.check.precision_message.find("bf16-mixed exceeded the budget"), std::string::npos)
      << tight.check.precision_message;
  EXPECT_EQ(tight.check.precision, "float32");
  EXPECT_NE(tight.check.precision_message.find("exceeded the budget"), std::string::npos)
      << tight.check.precision_message;
  for (const auto& [batch, list] : tight.engines) EXPECT_EQ(list[0]->info().bf16_ops, 0) << batch;
}

bool Int8Here() { return PassesOffOn("cpu").count("fuse_qdq") == 0; }

// int8: true puts int8 first on the ladder: within the budget its integer products are
// served; beyond it the ladder climbs through bf16 (where the CPU has it) to float32, each
// step said; without warm-up rows there is nothing to calibrate on.
TEST(PrecisionAuto, Int8IsCalibratedAndServedWithinTheBudget) {
  BuiltModel loose = Build(0.05, "lowest", /*int8=*/true);
  BuiltModel tight = Build(1e-7, "lowest", /*int8=*/true);
  ASSERT_TRUE(loose.check.ok && tight.check.ok);
  if (!Int8Here()) {
    EXPECT_EQ(loose.check.precision.find("int8"), std::string::npos) << loose.check.precision;
    GTEST_SKIP() << "this CPU (at the ISA level in force) has no int8 dot product";
  }
  EXPECT_EQ(loose.check.precision, "int8") << loose.check.precision_message;
  ASSERT_NE(loose.calibration, nullptr);
  EXPECT_TRUE(loose.calibration->count("x"));
  for (const auto& [batch, list] : loose.engines) EXPECT_GT(list[0]->info().int8_ops, 0) << batch;
  EXPECT_GT(loose.check.norm_rel_err, 0.0);
  EXPECT_LE(loose.check.norm_rel_err, 0.05);
  // NaN quantizes to a number: the non-finite feed is skipped and said, not bisected.
  EXPECT_FALSE(loose.check.nonfinite_ok);
  EXPECT_NE(loose.check.nonfinite_message.find("int8"), std::string::npos);
  EXPECT_TRUE(loose.check.disabled_passes.empty());
  EXPECT_TRUE(tight.check.nonfinite_ok);  // float32 in the end, checked on it
  EXPECT_NE(tight.check.precision_message.find("int8 exceeded the budget"), std::string::npos)
      << tight.check.precision_message;
  EXPECT_EQ(tight.check.precision, "float32") << tight.check.precision_message;
  for (const auto& [batch, list] : tight.engines) EXPECT_EQ(list[0]->info().int8_ops, 0) << batch;
  BuiltModel unchecked = Build(0.05, "lowest", /*int8=*/true, /*warmup=*/false);
  EXPECT_NE(unchecked.check.precision_message.find("int8 needs the warm-up inputs"),
            std::string::npos)
      << unchecked.check.precision_message;
  EXPECT_EQ(unchecked.check.precision.find("int8"), std::string::npos);
  EXPECT_NE(loose.check.precision_message.find("int8 calibrated on the seeded random warm-up rows"),
            std::string::npos)
      << loose.check.precision_message;
}

// Over the budget, int8 tries int8-mixed once before bf16: the products whose rounding the
// output feels stay float (the loud branch and the first layer), the scaled branch's stays
// integer, and the result is within the budget.
TEST(PrecisionAuto, Int8OverTheBudgetKeepsTheProductsTheOutputFeelsInFloat) {
  if (!Int8Here()) GTEST_SKIP() << "no int8 dot product here";
  BuiltModel all = Build(0.05, "lowest", /*int8=*/true, true, "", Branches);
  ASSERT_EQ(all.check.precision, "int8") << all.check.precision_message;
  const double full = all.check.norm_rel_err;
  ASSERT_GT(full, 1e-4);
  BuiltModel mixed = Build(full / 2, "lowest", /*int8=*/true, true, "", Branches);
  ASSERT_TRUE(mixed.check.ok);
  EXPECT_EQ(mixed.check.precision, "int8-mixed") << mixed.check.precision_message;
  EXPECT_NE(mixed.check.precision_message.find("int8 exceeded the budget"), std::string::npos)
      << mixed.check.precision_message;
  EXPECT_NE(mixed.check.precision_message.find("of the estimated noise kept"), std::string::npos)
      << mixed.check.precision_message;
  EXPECT_LE(mixed.check.norm_rel_err, full / 2);
  for (const auto& [batch, list] : mixed.engines) {
    EXPECT_GT(list[0]->info().int8_ops, 0) << batch;
    EXPECT_LT(list[0]->info().int8_ops, all.engines.at(batch)[0]->info().int8_ops) << batch;
  }
  EXPECT_LT(mixed.int8_noise_kept, 1.0);
  // The share follows the measured error (noise powers add) and gives up when tiny.
  EXPECT_NEAR(Int8NoiseToKeep(0.02, 0.01), std::pow(kInt8MixedMargin / 2, 2), 1e-12);
  EXPECT_EQ(Int8NoiseToKeep(1.0, 1e-7), 0.0);
  EXPECT_EQ(Int8NoiseToKeep(std::nan(""), 0.01), 0.0);
}

// The ladder's verdict is kept in the engine cache: a reload starts where the first build
// settled (int8-mixed here), takes every bucket from the cache, calibrates nothing and says
// so; a changed budget climbs the ladder afresh.
TEST(PrecisionAuto, AReloadStartsWhereTheLadderSettled) {
  if (!Int8Here()) GTEST_SKIP() << "no int8 dot product here";
  const double full = Build(0.05, "lowest", /*int8=*/true, true, "", Branches).check.norm_rel_err;
  ASSERT_GT(full, 1e-4);
  EngineCache cache("");
  BuiltModel first = Build(full / 2, "lowest", /*int8=*/true, true, "", Branches, &cache);
  ASSERT_EQ(first.check.precision, "int8-mixed") << first.check.precision_message;
  EXPECT_EQ(first.times.cache_hits, 0);
  EXPECT_NE(first.calibration, nullptr);
  BuiltModel again = Build(full / 2, "lowest", /*int8=*/true, true, "", Branches, &cache);
  EXPECT_EQ(again.check.precision, "int8-mixed") << again.check.precision_message;
  EXPECT_EQ(again.times.cache_hits, static_cast<int>(again.buckets.size()));
  // Nothing calibrated again (no int8 compile ran), but the ranges came back with the
  // verdict, for the engines of shapes compiled later.
  ASSERT_NE(again.calibration, nullptr);
  ASSERT_EQ(again.calibration->size(), first.calibration->size());
  for (const auto& [name, r] : *first.calibration) {
    const passes::ValueRange& back = again.calibration->at(name);
    EXPECT_EQ(back.lo, r.lo) << name;
    EXPECT_EQ(back.hi, r.hi) << name;
    EXPECT_DOUBLE_EQ(back.mean_sq, r.mean_sq) << name;
  }
  EXPECT_EQ(
      again.check.precision_message.find("int8 calibrated", first.check.precision_message.size()),
      std::string::npos);
  // An unchecked engine compiled later (a shape class) quantizes with those ranges.
  ModelConfig config;
  config.max_batch_size = 2;
  config.precision.mode = "auto";
  config.precision.int8 = true;
  config.precision.prefer = "lowest";
  config.precision.max_abs_error = config.precision.max_rel_error = full / 2;
  ASSERT_TRUE(FinalizeModelConfig(config).ok());
  absl::StatusOr<std::unique_ptr<runtime::Engine>> later =
      BuildShapeEngine(*Branches(), config, again, {}, 2, /*check=*/false);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_GT((*later)->info().int8_ops, 0);
  EXPECT_EQ(again.int8_noise_kept, first.int8_noise_kept);
  EXPECT_EQ(again.check.precision_message,
            first.check.precision_message + "; the ladder's verdict, from the engine cache");
  BuiltModel other = Build(full / 3, "lowest", /*int8=*/true, true, "", Branches, &cache);
  EXPECT_EQ(other.check.precision_message.find("verdict"), std::string::npos)
      << other.check.precision_message;
  EXPECT_NE(other.check.precision_message.find("int8 exceeded the budget"), std::string::npos);
}

// Shipped samples are the calibration set: every set, said so.
TEST(PrecisionAuto, Int8CalibratesOnTheShippedSamples) {
  if (!Int8Here()) GTEST_SKIP() << "no int8 dot product here";
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "kiln_int8_samples";
  std::filesystem::remove_all(dir);
  for (int k = 0; k < 3; ++k) {
    const std::filesystem::path set = dir / ("test_data_set_" + std::to_string(k));
    std::filesystem::create_directories(set);
    ASSERT_TRUE(
        onnx_io::WriteTensorFile(Wave({1, 64}, 0.1 * (k + 1)), "x", (set / "input_0.pb").string())
            .ok());
  }
  BuiltModel m = Build(0.05, "lowest", /*int8=*/true, /*warmup=*/true, dir.string());
  ASSERT_TRUE(m.check.ok);
  EXPECT_NE(m.check.precision_message.find("int8 calibrated on 3 sample set(s)"), std::string::npos)
      << m.check.precision_message;
  EXPECT_EQ(m.check.precision, "int8") << m.check.precision_message;
}

TEST(PrecisionAuto, TheLadderAndTheRivals) {
  const bool bf16 = !LowerPrecisionOn("cpu").empty();
  EXPECT_EQ(NextPrecision("int8", "cpu"), bf16 ? "bf16" : "float32");
  EXPECT_EQ(NextPrecision("int8-mixed", "cpu"), bf16 ? "bf16" : "float32");
  EXPECT_EQ(PrecisionOf({{1, "int8"}, {2, "int8-mixed"}, {4, "bf16"}}),
            "int8 (batch 1), int8-mixed (batch 2), bf16 (batch 4)");
  EXPECT_EQ(NextPrecision("bf16", "cpu"), "bf16-mixed");
  EXPECT_EQ(NextPrecision("bf16-mixed", "cpu"), "float32");
  EXPECT_EQ(RivalsOf("int8", "cpu"), bf16 ? std::vector<std::string>({"bf16", "float32"})
                                          : std::vector<std::string>({"float32"}));
  EXPECT_EQ(RivalsOf("bf16", "cpu"), std::vector<std::string>({"float32"}));
  PrecisionConfig p;
  EXPECT_NE(LowestPrecisionOn("cpu", p), "int8");  // not without int8: true
  p.int8 = true;
  EXPECT_EQ(LowestPrecisionOn("cpu", p) == "int8", Int8Here());
}

// An engine that only reports how many bf16 (and int8) products it has.
runtime::EngineInfo Products(int bf16_ops, int int8_ops = 0) {
  runtime::EngineInfo info;
  info.bf16_ops = bf16_ops;
  info.int8_ops = int8_ops;
  return info;
}

// Each bucket reports the ladder step it was compiled at, so a model whose batch 1 passed at
// bf16 and whose batch 8 fell back to bf16-mixed says both (not the last step for all).
TEST(PrecisionOf, NamesEachBucketsStepWhenTheyDiffer) {
  EXPECT_EQ(BucketPrecision(testing_util::InfoEngine(Products(12)), "bf16-mixed"), "bf16-mixed");
  // Negative: a bucket compiled at bf16 whose engine has no bf16 product computes float32.
  EXPECT_EQ(BucketPrecision(testing_util::InfoEngine(Products(0)), "bf16"), "float32");
  EXPECT_EQ(PrecisionOf({}), "float32");
  EXPECT_EQ(PrecisionOf({{1, "bf16"}, {8, "bf16"}}), "bf16");
  EXPECT_EQ(PrecisionOf({{1, "float32"}, {8, "float32"}}), "float32");
  EXPECT_EQ(PrecisionOf({{1, "bf16"}, {2, "bf16"}, {8, "bf16-mixed"}}),
            "bf16 (batch 1, 2), bf16-mixed (batch 8)");
  EXPECT_EQ(PrecisionOf({{1, "bf16"}, {4, "float32"}, {8, "bf16-mixed"}}),
            "bf16 (batch 1), bf16-mixed (batch 8), float32 (batch 4)");
  EXPECT_EQ(BucketPrecision(testing_util::InfoEngine(Products(0, 3)), "int8"), "int8");
  EXPECT_EQ(BucketPrecision(testing_util::InfoEngine(Products(0, 0)), "int8"), "float32");
  EXPECT_EQ(BucketPrecision(testing_util::InfoEngine(Products(0, 3)), "float32"),
            "float32");  // a QDQ model's own
  EXPECT_EQ(PrecisionOf({{1, "int8"}, {8, "bf16"}}), "int8 (batch 1), bf16 (batch 8)");
  // A precision outside the ladder is named too, after it.
  EXPECT_EQ(PrecisionOf({{1, "bf16"}, {2, "fp16"}}), "bf16 (batch 1), fp16 (batch 2)");
}

// An engine whose run takes `ms` (sleeping), with one float input.
class SleepEngine : public testing_util::InfoEngine {
 public:
  explicit SleepEngine(double ms) : testing_util::InfoEngine(Products(1)), ms_(ms) {
    specs_.push_back({"x", DType::kFloat32, {2, 3}});
  }
  const std::vector<runtime::TensorSpec>& inputs() const override { return specs_; }
  absl::Status Run(const std::vector<Tensor>& in, std::vector<Tensor>&) override {
    if (in.size() != 1 || in[0].shape() != std::vector<int64_t>{2, 3}) {
      return absl::InvalidArgumentError("zeros of the input specs expected");
    }
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms_));
    return absl::OkStatus();
  }

 private:
  double ms_;
  std::vector<runtime::TensorSpec> specs_;
};

TEST(PrecisionSpeed, TheLowerPrecisionIsServedOnlyWhenItIsFaster) {
  SleepEngine fast(2), slow(12), same(12);
  absl::StatusOr<SpeedComparison> c = CompareSpeed(fast, slow, 3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->keep_lowered);
  EXPECT_LT(c->lowered_ms, c->rival_ms);
  // Negative: slower, or no faster than float32, keeps the exact arithmetic.
  c = CompareSpeed(slow, fast, 3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->keep_lowered);
  c = CompareSpeed(same, slow, 3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->keep_lowered) << c->lowered_ms << " vs " << c->rival_ms;
}

// `prefer: fastest` (the default) times the first bucket and serves what it says: whichever
// wins on this machine, the message gives both times and the served precision agrees.
TEST(PrecisionSpeed, TheBuildServesWhatTheTimingChose) {
  if (!cpu::HasBf16DotProduct()) GTEST_SKIP() << "no native bf16 products here";
  BuiltModel m = Build(0.05, "fastest");
  ASSERT_TRUE(m.check.ok);
  const std::string& msg = m.check.precision_message;
  ASSERT_NE(msg.find("vs float32"), std::string::npos) << msg;
  const bool chose_float32 = msg.find(": float32 (") != std::string::npos;
  EXPECT_EQ(m.check.precision, chose_float32 ? "float32" : "bf16") << msg;
  for (const auto& [batch, list] : m.engines) {
    EXPECT_EQ(list[0]->info().bf16_ops > 0, !chose_float32) << batch;
  }
}

}  // namespace
}  // namespace kiln::server
