// Shared by the pass tests: every pass test checks structure (op counts, the changed flag)
// and numbers (the reference interpreter on the graph before and after, same inputs).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "compiler/shape/infer.h"
#include "ir/graph.h"
#include "ir/verifier.h"
#include "ops/interpreter.h"

namespace kiln::testing {

inline int CountOps(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type == op;
  return n;
}

inline const Node* FindOp(const Graph& g, const std::string& op) {
  for (const auto& node : g.nodes()) {
    if (node->op_type == op) return node.get();
  }
  return nullptr;
}

// |after - before| <= abs + rel * |before| for every element of every output.
struct Tolerance {
  double abs = 0.0;
  double rel = 0.0;
};

// Infers shapes, runs the pass, verifies the IR, re-infers, and compares every output with
// the graph before the pass; returns the pass's changed flag.
template <class F>
bool RunPassAndCompare(Graph& g, F pass, const ref::TensorMap& feeds, Tolerance tol = {}) {
  EXPECT_TRUE(shape::InferShapes(g).ok());
  auto before = g.Clone();
  absl::StatusOr<bool> changed = pass(g);
  EXPECT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(VerifyGraph(g).ok()) << VerifyGraph(g);
  EXPECT_TRUE(shape::InferShapes(g).ok());
  auto want = ref::Run(*before, feeds);
  auto got = ref::Run(g, feeds);
  EXPECT_TRUE(want.ok()) << want.status();
  EXPECT_TRUE(got.ok()) << got.status();
  if (!want.ok() || !got.ok()) return changed.ok() && *changed;
  for (const auto& [name, t] : *want) {
    EXPECT_TRUE(got->count(name)) << name;
    if (!got->count(name)) continue;
    const Tensor& o = got->at(name);
    EXPECT_EQ(o.shape(), t.shape()) << name;
    for (int64_t i = 0; i < t.numel() && o.shape() == t.shape(); ++i) {
      EXPECT_NEAR(o.GetDouble(i), t.GetDouble(i), tol.abs + tol.rel * std::fabs(t.GetDouble(i)))
          << name << "[" << i << "]";
    }
  }
  return changed.ok() && *changed;
}

}  // namespace kiln::testing
