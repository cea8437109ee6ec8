#include "server/metrics/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace kiln::server::metrics {
namespace {

bool ValidName(const std::string& s, bool allow_colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "kiln metrics: %s\n", what.c_str());
  std::abort();
}

void AppendSample(std::string& out, const std::string& name, const std::string& labels,
                  const std::string& value) {
  out += name;
  out += labels;
  out += ' ';
  out += value;
  out += '\n';
}

}  // namespace

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> b = {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3,
                                        5e-3,  10e-3,  25e-3,  50e-3,  0.1,  0.25,
                                        0.5,   1,      2.5,    5,      10};
  return b;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Histogram::Histogram(const std::vector<double>& bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // Buckets are `le` (<=): the first bound not below v. NaN lands in +Inf.
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Collect() const {
  Snapshot s;
  s.cumulative.reserve(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

void FamilyBase::Render(std::string& out) const {
  out += "# HELP " + name_ + " " + EscapeHelp(help_) + "\n";
  out += "# TYPE " + name_ + " " + type() + "\n";
  RenderChildren(out);
}

std::string FamilyBase::LabelBlock(const LabelValues& values, const std::string& extra) const {
  std::string out;
  for (size_t i = 0; i < label_names_.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += label_names_[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  if (!extra.empty()) out += (out.empty() ? "{" : ",") + extra;
  if (!out.empty()) out += "}";
  return out;
}

template <typename Child>
Child& Family<Child>::WithLabels(const LabelValues& values) {
  if (values.size() != label_names_.size()) {
    LabelValues fixed = values;
    fixed.resize(label_names_.size());
    return WithLabels(fixed);
  }
  {
    std::shared_lock<std::shared_mutex> lk(mu_);
    auto it = children_.find(values);
    if (it != children_.end()) return *it->second;
  }
  std::unique_lock<std::shared_mutex> lk(mu_);
  auto& slot = children_[values];
  if (!slot) slot = MakeChild();  // another thread may have created it between the locks
  return *slot;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

void CounterFamily::RenderChildren(std::string& out) const {
  std::shared_lock<std::shared_mutex> lk(mu_);
  for (const auto& [values, c] : children_) {
    AppendSample(out, name_, LabelBlock(values), FormatValue(c->Value()));
  }
}

void GaugeFamily::RenderChildren(std::string& out) const {
  std::shared_lock<std::shared_mutex> lk(mu_);
  for (const auto& [values, g] : children_) {
    AppendSample(out, name_, LabelBlock(values), FormatValue(g->Value()));
  }
}

std::unique_ptr<Histogram> HistogramFamily::MakeChild() const {
  return std::make_unique<Histogram>(bounds_);
}

void HistogramFamily::RenderChildren(std::string& out) const {
  std::shared_lock<std::shared_mutex> lk(mu_);
  for (const auto& [values, h] : children_) {
    const Histogram::Snapshot s = h->Collect();
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      const std::string le = i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf";
      AppendSample(out, name_ + "_bucket", LabelBlock(values, "le=\"" + le + "\""),
                   std::to_string(s.cumulative[i]));
    }
    AppendSample(out, name_ + "_sum", LabelBlock(values), FormatValue(s.sum));
    AppendSample(out, name_ + "_count", LabelBlock(values), std::to_string(s.count));
  }
}

template <typename F, typename... Args>
F& Registry::Add(const std::string& name, const std::string& help,
                 std::vector<std::string> label_names, Args&&... extra) {
  if (!ValidName(name, true)) Die("bad metric name '" + name + "'");
  for (const std::string& l : label_names) {
    if (!ValidName(l, false) || l.rfind("__", 0) == 0) Die("bad label name '" + l + "'");
  }
  std::lock_guard<std::mutex> lk(mu_);
  auto& slot = families_[name];
  if (!slot) {
    const bool unlabeled = label_names.empty();
    auto f = std::make_unique<F>(name, help, std::move(label_names), std::forward<Args>(extra)...);
    // A family without labels shows 0 from the start instead of appearing on first use.
    if (unlabeled) f->Get();
    slot = std::move(f);
  }
  F* f = dynamic_cast<F*>(slot.get());
  if (f == nullptr) Die("metric '" + name + "' registered twice with different types");
  return *f;
}

CounterFamily& Registry::AddCounter(const std::string& name, const std::string& help,
                                    std::vector<std::string> label_names) {
  return Add<CounterFamily>(name, help, std::move(label_names));
}

GaugeFamily& Registry::AddGauge(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names) {
  return Add<GaugeFamily>(name, help, std::move(label_names));
}

HistogramFamily& Registry::AddHistogram(const std::string& name, const std::string& help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> bounds) {
  for (const std::string& l : label_names) {
    if (l == "le") Die("histogram '" + name + "' may not use the label 'le'");
  }
  if (bounds.empty() || !std::is_sorted(bounds.begin(), bounds.end()) ||
      std::adjacent_find(bounds.begin(), bounds.end()) != bounds.end()) {
    Die("histogram '" + name + "' needs strictly ascending bucket bounds");
  }
  if (std::isinf(bounds.back())) bounds.pop_back();  // +Inf is always implied
  return Add<HistogramFamily>(name, help, std::move(label_names), std::move(bounds));
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string out;
  for (const auto& [name, f] : families_) f->Render(out);
  return out;
}

}  // namespace kiln::server::metrics
