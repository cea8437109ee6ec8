#include "compiler/shape/dim_expr.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "absl/strings/str_cat.h"

namespace kiln::shape {
namespace {

// A recursive-descent reader over one expression; `symbols` null: names are collected, not
// looked up (every name counts 0).
class Reader {
 public:
  Reader(const std::string& text, const std::map<std::string, int64_t>* symbols)
      : text_(text), symbols_(symbols) {}

  // The value, or nullopt with error() saying why.
  std::optional<int64_t> Parse() {
    std::optional<int64_t> v = Sum();
    Skip();
    if (v && pos_ != text_.size()) return Fail("unexpected '" + text_.substr(pos_, 1) + "'");
    return v;
  }
  const std::string& error() const { return error_; }
  const std::vector<std::string>& names() const { return names_; }
  int operators() const { return operators_; }

 private:
  std::optional<int64_t> Fail(const std::string& why) {
    if (error_.empty()) error_ = why;
    return std::nullopt;
  }
  void Skip() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool Take(char c) {
    Skip();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      ++operators_;
      return true;
    }
    return false;
  }
  std::optional<int64_t> Sum() {
    std::optional<int64_t> v = Product();
    while (v) {
      if (Take('+')) {
        std::optional<int64_t> r = Product();
        v = r ? std::optional<int64_t>(*v + *r) : std::nullopt;
      } else if (Take('-')) {
        std::optional<int64_t> r = Product();
        v = r ? std::optional<int64_t>(*v - *r) : std::nullopt;
      } else {
        break;
      }
    }
    return v;
  }
  std::optional<int64_t> Product() {
    std::optional<int64_t> v = Factor();
    while (v && Take('*')) {
      std::optional<int64_t> r = Factor();
      v = r ? std::optional<int64_t>(*v * *r) : std::nullopt;
    }
    return v;
  }
  std::optional<int64_t> Factor() {
    Skip();
    const size_t start = pos_;
    if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      if (pos_ - start > 12) return Fail("a number too long");
      return std::stoll(text_.substr(start, pos_ - start));
    }
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    if (pos_ < text_.size() && (std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      while (pos_ < text_.size() && ident(text_[pos_])) ++pos_;
      const std::string name = text_.substr(start, pos_ - start);
      if (std::find(names_.begin(), names_.end(), name) == names_.end()) names_.push_back(name);
      if (!symbols_) return 0;
      auto it = symbols_->find(name);
      if (it == symbols_->end()) return Fail("'" + name + "' has no value");
      return it->second;
    }
    return Fail(pos_ < text_.size() ? "unexpected '" + text_.substr(pos_, 1) + "'"
                                    : "an operand is missing");
  }

  const std::string& text_;
  const std::map<std::string, int64_t>* symbols_;
  size_t pos_ = 0;
  int operators_ = 0;
  std::string error_;
  std::vector<std::string> names_;
};

}  // namespace

bool IsDimExpr(const std::string& param) {
  Reader r(param, nullptr);
  return r.Parse().has_value() && r.operators() > 0;
}

std::vector<std::string> DimExprSymbols(const std::string& expr) {
  Reader r(expr, nullptr);
  if (!r.Parse()) return {};
  return r.names();
}

absl::StatusOr<int64_t> EvalDimExpr(const std::string& expr,
                                    const std::map<std::string, int64_t>& symbols) {
  Reader r(expr, &symbols);
  std::optional<int64_t> v = r.Parse();
  if (!v) return absl::InvalidArgumentError(absl::StrCat("dim '", expr, "': ", r.error()));
  if (*v < 0) {
    return absl::InvalidArgumentError(absl::StrCat("dim '", expr, "' comes out at ", *v));
  }
  return *v;
}

bool SumTerms(const std::string& expr, std::vector<std::pair<std::string, int64_t>>* terms) {
  if (!IsDimExpr(expr) || expr.find_first_of("-*") != std::string::npos) return false;
  terms->clear();
  size_t start = 0;
  while (start <= expr.size()) {
    size_t end = expr.find('+', start);
    if (end == std::string::npos) end = expr.size();
    std::string term = expr.substr(start, end - start);
    term.erase(0, term.find_first_not_of(" \t"));
    term.erase(term.find_last_not_of(" \t") + 1);
    if (std::isdigit(static_cast<unsigned char>(term[0]))) {
      terms->emplace_back("", std::stoll(term));
    } else {
      terms->emplace_back(term, 0);
    }
    start = end + 1;
  }
  return true;
}

void BindDimExprs(Graph& graph, const std::map<std::string, int64_t>& symbols) {
  for (Value* in : graph.inputs) {
    if (!in->shape) continue;
    for (Dim& d : *in->shape) {
      if (d.known() || !IsDimExpr(d.param)) continue;
      absl::StatusOr<int64_t> v = EvalDimExpr(d.param, symbols);
      if (v.ok()) d = Dim(*v);
    }
  }
}

}  // namespace kiln::shape
