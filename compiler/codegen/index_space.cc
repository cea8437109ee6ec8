#include "compiler/codegen/index_space.h"

#include <algorithm>
#include <cstdlib>

namespace kiln::codegen {

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

std::optional<std::vector<int64_t>> BroadcastStrides(const std::vector<int64_t>& in,
                                                     const std::vector<int64_t>& out) {
  if (in.size() > out.size()) return std::nullopt;
  const std::vector<int64_t> own = RowMajorStrides(in);
  const size_t lead = out.size() - in.size();
  std::vector<int64_t> s(out.size(), 0);
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == out[lead + d]) {
      s[lead + d] = in[d] == 1 ? 0 : own[d];
    } else if (in[d] != 1) {
      return std::nullopt;
    }
  }
  return s;
}

IndexSpace Coalesce(IndexSpace space) {
  IndexSpace out;
  out.bases = space.bases;
  out.strides.assign(space.strides.size(), {});
  for (size_t d = 0; d < space.dims.size(); ++d) {
    const int64_t n = space.dims[d];
    if (n == 1) continue;
    // Merge into the previous kept dim when, for every operand, stepping the previous dim
    // once equals stepping this one n times.
    bool merge = !out.dims.empty();
    for (size_t k = 0; merge && k < space.strides.size(); ++k) {
      merge = out.strides[k].back() == space.strides[k][d] * n;
    }
    if (merge) {
      out.dims.back() *= n;
      for (size_t k = 0; k < space.strides.size(); ++k) out.strides[k].back() = space.strides[k][d];
      continue;
    }
    out.dims.push_back(n);
    for (size_t k = 0; k < space.strides.size(); ++k) out.strides[k].push_back(space.strides[k][d]);
  }
  if (out.bases.size() < space.strides.size()) out.bases.resize(space.strides.size(), 0);
  return out;
}

bool IsLinear(const IndexSpace& space, size_t k) {
  return space.bases[k] == 0 && space.strides[k] == RowMajorStrides(space.dims);
}

int64_t Elements(const IndexSpace& space) {
  int64_t n = 1;
  for (int64_t d : space.dims) n *= d;
  return n;
}

std::string IndexType(const IndexSpace& space) {
  // Room for the grid-stride loop to step one full grid past the end.
  constexpr int64_t kLimit = (int64_t{1} << 31) - (int64_t{65535} * 1024);
  int64_t reach = Elements(space);
  for (size_t k = 0; k < space.strides.size(); ++k) {
    int64_t extent = std::llabs(space.bases[k]);
    for (size_t d = 0; d < space.dims.size(); ++d) {
      extent += (space.dims[d] - 1) * std::llabs(space.strides[k][d]);
    }
    reach = std::max(reach, extent);
  }
  return reach < kLimit ? "int" : "long long";
}

OffsetCode EmitOffsets(const IndexSpace& space, const std::string& index) {
  OffsetCode code;
  const size_t rank = space.dims.size();
  std::vector<bool> needed(rank, false);
  std::vector<bool> linear(space.strides.size());
  for (size_t k = 0; k < space.strides.size(); ++k) {
    linear[k] = IsLinear(space, k);
    for (size_t d = 0; d < rank && !linear[k]; ++d) needed[d] = needed[d] || space.strides[k][d] != 0;
  }
  // Innermost first: c_d = r % dim, r /= dim; the outermost needs no modulo.
  size_t first = rank;
  for (size_t d = 0; d < rank; ++d) {
    if (needed[d]) {
      first = d;
      break;
    }
  }
  if (first < rank) {
    const std::string t = IndexType(space);
    code.lines.push_back(t + " r = " + index + ";");
    for (size_t d = rank; d-- > first;) {
      const std::string c = "c" + std::to_string(d), n = std::to_string(space.dims[d]);
      if (d == 0) {
        code.lines.push_back("const " + t + " " + c + " = r;");
      } else {
        code.lines.push_back("const " + t + " " + c + " = r % " + n + "; r /= " + n + ";");
      }
    }
    code.lines.push_back("(void)r;");
  }
  for (size_t k = 0; k < space.strides.size(); ++k) {
    if (linear[k]) {
      code.offsets.push_back(index);
      continue;
    }
    std::string e = std::to_string(space.bases[k]);
    for (size_t d = 0; d < rank; ++d) {
      const int64_t s = space.strides[k][d];
      if (s != 0) e += " + c" + std::to_string(d) + " * " + std::to_string(s);
    }
    code.offsets.push_back("(" + e + ")");
  }
  return code;
}

}  // namespace kiln::codegen
