// Shared by the CPU engine's tests (cpu_engine_test.cc, cpu_own_kernels_test.cc): random
// tensors and the check of an engine against the reference interpreter in both activation
// layouts.
#pragma once

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "ops/interpreter.h"
#include "runtime/check/differential.h"
#include "runtime/cpu/cpu_engine.h"

namespace kiln::cpu_test {

using kiln_ops::EpilogueStep;

inline Tensor Random(std::vector<int64_t> shape, uint64_t seed, float scale = 1.f) {
  Tensor t(DType::kFloat32, shape);
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    p[i] = scale * (static_cast<float>((s >> 33) % 20001) / 10000.f - 1.f);
  }
  return t;
}

struct Outcome {
  CompiledGraph compiled;
  std::unique_ptr<runtime::Engine> engine;
};

// Builds the engine in `layout`, runs it and the reference on the same random inputs, and
// compares every output (rtol 1e-4, atol 1e-5).
inline void ExpectEngineMatches(Outcome& o, cpu::ActivationLayout layout, int max_fallbacks) {
  SCOPED_TRACE(cpu::ActivationLayoutName(layout));
  cpu::CpuEngineOptions eo;
  eo.layout = layout;
  auto e = cpu::BuildCpuEngine(o.compiled, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return;
  o.engine = std::move(*e);
  EXPECT_EQ(o.engine->info().layout, cpu::ActivationLayoutName(layout));
  EXPECT_LE(o.engine->info().fallback_ops, max_fallbacks);
  auto feeds = check::RandomInputs(*o.compiled.graph, {});
  EXPECT_TRUE(feeds.ok()) << feeds.status();
  auto want = ref::Run(*o.compiled.graph, *feeds);
  EXPECT_TRUE(want.ok()) << want.status();
  std::vector<Tensor> ins, outs;
  for (const auto& spec : o.engine->inputs()) ins.push_back(feeds->at(spec.name));
  absl::Status st = o.engine->Run(ins, outs);
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok() || !want.ok()) return;
  // A run writes every output whole: outputs handed in full of NaN (a reused buffer's old
  // bytes) come back as the first run's, bit for bit.
  std::vector<Tensor> again;
  for (const Tensor& t : outs) {
    Tensor poisoned = t.Clone();
    if (poisoned.dtype() == DType::kFloat32) {
      std::fill_n(poisoned.mutable_data<float>(), poisoned.numel(), std::nanf(""));
    }
    again.push_back(std::move(poisoned));
  }
  ASSERT_TRUE(o.engine->Run(ins, again).ok());
  for (size_t k = 0; k < outs.size(); ++k) {
    EXPECT_EQ(std::memcmp(again[k].raw(), outs[k].raw(), outs[k].nbytes()), 0)
        << "output " << k << " depends on what its buffer held before the run";
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor& w = want->at(o.engine->outputs()[k].name);
    EXPECT_EQ(outs[k].shape(), w.shape());
    if (outs[k].shape() != w.shape()) continue;
    int bad = 0;
    for (int64_t i = 0; i < w.numel() && bad < 3; ++i) {
      const double a = outs[k].GetDouble(i), b = w.GetDouble(i);
      const bool ok = std::abs(a - b) <= 1e-5 + 1e-4 * std::abs(b);
      bad += !ok;
      EXPECT_TRUE(ok) << "output " << k << " element " << i << ": engine " << a << " reference "
                      << b;
    }
  }
}

// Compiles (O0 by default: the nodes as built) and checks the engine in both activation
// layouts against the reference; the returned engine is the primitive-layout one.
inline Outcome ExpectMatchesReference(std::unique_ptr<Graph> g, int max_fallbacks = 0,
                                      OptLevel level = OptLevel::kO0) {
  Outcome o;
  CompileOptions co;
  co.pipeline.level = level;
  absl::StatusOr<CompiledGraph> c = CompileGraph(*g, co);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return o;
  o.compiled = std::move(*c);
  ExpectEngineMatches(o, cpu::ActivationLayout::kBlocked, max_fallbacks);
  ExpectEngineMatches(o, cpu::ActivationLayout::kPrimitive, max_fallbacks);
  return o;
}

inline Attribute Ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }

inline Value* FusedConv(GraphBuilder& b, std::vector<Value*> in,
                        std::map<std::string, Attribute> attrs,
                        const std::vector<EpilogueStep>& steps) {
  b.graph().opsets[kKilnDomain] = 1;
  Value* y = b.Op("FusedConv", std::move(in), std::move(attrs), kKilnDomain);
  kiln_ops::WriteEpilogue(*y->producer, steps);
  return y;
}

}  // namespace kiln::cpu_test
