// A small Prometheus metrics registry (prometheus-cpp is not packaged in Debian 12): counter,
// gauge and histogram families with labels, rendered in the text exposition format 0.0.4.
//
// Hot path: look a child up once (WithLabels takes a lock and may allocate), keep the
// reference, then Inc/Set/Observe are lock-free atomics. Children live as long as their
// family and are never removed, so a held reference stays valid; families live as long as
// their Registry.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

namespace kiln::server::metrics {

using LabelValues = std::vector<std::string>;

class Counter {
 public:
  // Negative increments are ignored: a counter only goes up (rate() relies on it).
  void Inc(double v = 1.0) {
    if (v > 0) value_.fetch_add(v, std::memory_order_relaxed);
  }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  void Dec(double v = 1.0) { value_.fetch_sub(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds`: ascending upper bounds, without +Inf; owned by the family, outlives this.
  explicit Histogram(const std::vector<double>& bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0.0;
    uint64_t count = 0;  // == cumulative.back()
  };
  // Not atomic across buckets: a concurrent Observe may show in some numbers and not others,
  // but counts are derived from the buckets so `_count` always equals the +Inf bucket.
  Snapshot Collect() const;

 private:
  const std::vector<double>& bounds_;
  // Per-bucket (not cumulative) counts, so Observe touches one bucket; the last is +Inf.
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0.0};
};

// Name, help and label names of a family, and its rendering.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  virtual const char* type() const = 0;
  // Appends HELP, TYPE and every child's samples.
  void Render(std::string& out) const;

 protected:
  virtual void RenderChildren(std::string& out) const = 0;
  // `{a="x",b="y"` plus `extra` (already formatted, e.g. `le="0.1"`), then `}`; empty when
  // there is nothing to put in braces.
  std::string LabelBlock(const LabelValues& values, const std::string& extra = "") const;

  const std::string name_, help_;
  const std::vector<std::string> label_names_;
};

template <typename Child>
class Family : public FamilyBase {
 public:
  using FamilyBase::FamilyBase;
  // The child for these label values, created on first use. A wrong number of values is
  // padded with "" or truncated rather than crashing the server.
  Child& WithLabels(const LabelValues& values);
  // The only child of a family without labels.
  Child& Get() { return WithLabels({}); }

 protected:
  virtual std::unique_ptr<Child> MakeChild() const = 0;
  mutable std::shared_mutex mu_;
  std::map<LabelValues, std::unique_ptr<Child>> children_;  // guarded by mu_
};

class CounterFamily final : public Family<Counter> {
 public:
  using Family::Family;
  const char* type() const override { return "counter"; }

 private:
  std::unique_ptr<Counter> MakeChild() const override { return std::make_unique<Counter>(); }
  void RenderChildren(std::string& out) const override;
};

class GaugeFamily final : public Family<Gauge> {
 public:
  using Family::Family;
  const char* type() const override { return "gauge"; }

 private:
  std::unique_ptr<Gauge> MakeChild() const override { return std::make_unique<Gauge>(); }
  void RenderChildren(std::string& out) const override;
};

class HistogramFamily final : public Family<Histogram> {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds)
      : Family(std::move(name), std::move(help), std::move(label_names)),
        bounds_(std::move(bounds)) {}
  const char* type() const override { return "histogram"; }
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::unique_ptr<Histogram> MakeChild() const override;
  void RenderChildren(std::string& out) const override;
  const std::vector<double> bounds_;
};

class Registry {
 public:
  // Registering a name twice returns the first family (same type required). Bad metric or
  // label names, or a type clash, are programming errors and abort with a message.
  CounterFamily& AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> label_names = {});
  GaugeFamily& AddGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names = {});
  HistogramFamily& AddHistogram(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names, std::vector<double> bounds);
  // Every family in name order, in the text exposition format 0.0.4.
  std::string Render() const;

 private:
  template <typename F, typename... Args>
  F& Add(const std::string& name, const std::string& help, std::vector<std::string> label_names,
         Args&&... extra);

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<FamilyBase>> families_;  // guarded by mu_
};

// The Content-Type of Render()'s output.
inline constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// 50us .. 10s in 1-2.5-5 steps (x2 to x2.5): request, queue and compute latencies.
const std::vector<double>& LatencyBuckets();
// Sample values: shortest round-trip decimal; NaN, +Inf, -Inf as Prometheus spells them.
std::string FormatValue(double v);
// Label values escape backslash, double quote and newline.
std::string EscapeLabelValue(const std::string& v);
// HELP text escapes backslash and newline.
std::string EscapeHelp(const std::string& v);

}  // namespace kiln::server::metrics
