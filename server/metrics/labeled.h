// Building blocks for kiln_* metric families on a prometheus-cpp registry: a family with
// positional label values and the three constructors. Shared by the process-wide families
// (kiln_metrics.cc) and the scrape-time gauges the serving layer computes per /metrics call.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln::server::metrics {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

// A prometheus-cpp family with positional label values (in the order of `names`), so call
// sites read as the README's table does. prometheus-cpp keys children by a name -> value
// map; Add returns the existing child for labels it has seen, so a handle looked up once
// (BatcherMetrics) stays valid and the hot path is the child's own update.
template <class T>
class Labeled {
 public:
  Labeled(prometheus::Family<T>& family, std::vector<std::string> names,
          std::vector<double> bounds = {})
      : family_(family), names_(std::move(names)), bounds_(std::move(bounds)) {}
  // A wrong number of values is padded with "" or truncated rather than failing a request.
  T& With(const std::vector<std::string>& values) {
    prometheus::Labels labels;
    for (size_t i = 0; i < names_.size(); ++i)
      labels[names_[i]] = i < values.size() ? values[i] : "";
    if constexpr (std::is_same_v<T, Histogram>) {
      return family_.Add(labels, bounds_);
    } else {
      return family_.Add(labels);
    }
  }
  T& Get() { return With({}); }

 private:
  prometheus::Family<T>& family_;
  const std::vector<std::string> names_;
  const std::vector<double> bounds_;
};

inline Labeled<Histogram> AddHistogram(prometheus::Registry& r, const std::string& name,
                                       const std::string& help, std::vector<std::string> labels,
                                       std::vector<double> bounds) {
  return {prometheus::BuildHistogram().Name(name).Help(help).Register(r), std::move(labels),
          std::move(bounds)};
}
inline Labeled<Counter> AddCounter(prometheus::Registry& r, const std::string& name,
                                   const std::string& help, std::vector<std::string> labels) {
  return {prometheus::BuildCounter().Name(name).Help(help).Register(r), std::move(labels)};
}
inline Labeled<Gauge> AddGauge(prometheus::Registry& r, const std::string& name,
                               const std::string& help, std::vector<std::string> labels = {}) {
  return {prometheus::BuildGauge().Name(name).Help(help).Register(r), std::move(labels)};
}

}  // namespace kiln::server::metrics
