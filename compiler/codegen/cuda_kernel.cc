#include "compiler/codegen/cuda_kernel.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace kiln::codegen {

namespace {

// Helpers follow the reference interpreter's rules (ONNX's NumPy definitions): max/min
// propagate NaN like numpy.maximum, clamps compare (fminf/fmaxf would drop NaN), Round halves
// to even (rintf). Block reductions are shared-memory trees with __syncthreads only (no warp
// shuffles), so the host shim can run them with one fiber per thread.
constexpr char kPrelude[] = R"KILN(// Kiln device prelude.
__device__ __forceinline__ float kiln_bits(unsigned int u) { return __int_as_float((int)u); }
__device__ __forceinline__ float kiln_max(float a, float b) {
  return a != a ? a : ((b != b || b > a) ? b : a);
}
__device__ __forceinline__ float kiln_min(float a, float b) {
  return a != a ? a : ((b != b || b < a) ? b : a);
}
__device__ __forceinline__ double kiln_maxd(double a, double b) {
  return a != a ? a : ((b != b || b > a) ? b : a);
}
__device__ __forceinline__ double kiln_mind(double a, double b) {
  return a != a ? a : ((b != b || b < a) ? b : a);
}
template <class T>
__device__ __forceinline__ T kiln_imax(T a, T b) { return b > a ? b : a; }
template <class T>
__device__ __forceinline__ T kiln_imin(T a, T b) { return b < a ? b : a; }
// The larger of two, NaN never picked (Softmax's shift, as the reference takes it).
__device__ __forceinline__ float kiln_max_num(float a, float b) { return b > a ? b : a; }
__device__ __forceinline__ float kiln_clamp01(float v) { return v < 0.f ? 0.f : (v > 1.f ? 1.f : v); }
__device__ __forceinline__ float kiln_clip(float v, float lo, float hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}
__device__ __forceinline__ float kiln_sigmoid(float v) { return 1.f / (1.f + expf(-v)); }
__device__ __forceinline__ float kiln_softplus(float v) {
  return v > 0.f ? v + log1pf(expf(-v)) : log1pf(expf(v));
}
__device__ __forceinline__ float kiln_sign(float v) { return v > 0.f ? 1.f : (v < 0.f ? -1.f : v); }
__device__ __forceinline__ float kiln_gelu(float v) {
  return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
}
__device__ __forceinline__ float kiln_gelu_tanh(float v) {
  return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
}
// Float to integer as the reference casts: truncation, saturation at the type's range, NaN to 0.
__device__ __forceinline__ long long kiln_f2i(double v, double lo, double hi, long long ilo,
                                              long long ihi) {
  if (v != v) return 0;
  const double t = trunc(v);
  return t <= lo ? ilo : (t >= hi ? ihi : (long long)t);
}
struct kiln_op_sum { __device__ float operator()(float a, float b) const { return a + b; } };
struct kiln_op_prod { __device__ float operator()(float a, float b) const { return a * b; } };
struct kiln_op_max { __device__ float operator()(float a, float b) const { return kiln_max(a, b); } };
struct kiln_op_min { __device__ float operator()(float a, float b) const { return kiln_min(a, b); } };
struct kiln_op_max_num {
  __device__ float operator()(float a, float b) const { return kiln_max_num(a, b); }
};
// Combines one value per thread over the block (blockDim.x a power of two); smem holds
// blockDim.x floats. Every thread of the block must call it; all get the result.
template <class Op>
__device__ float kiln_block_reduce(float v, float* smem, Op op) {
  const unsigned int t = threadIdx.x;
  smem[t] = v;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) smem[t] = op(smem[t], smem[t + s]);
    __syncthreads();
  }
  const float r = smem[0];
  __syncthreads();  // smem is reused by the next reduction
  return r;
}
)KILN";

}  // namespace

const std::string& Prelude() {
  static const std::string* p = new std::string(kPrelude);
  return *p;
}

std::string ModuleSource(const std::vector<Kernel>& kernels) {
  std::string s = Prelude();
  for (const Kernel& k : kernels) {
    s += "\n";
    s += k.source;
  }
  return s;
}

std::string Identifier(const std::string& s) {
  std::string id;
  for (char c : s) id += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (id.empty() || std::isdigit(static_cast<unsigned char>(id[0]))) id = "k_" + id;
  return id;
}

std::string FloatLiteral(float v) {
  if (!std::isfinite(v)) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    char buf[40];
    std::snprintf(buf, sizeof buf, "kiln_bits(0x%08xu)", bits);
    return buf;
  }
  char buf[48];
  // %a prints the exact binary value; the parentheses keep a leading minus from merging with
  // a preceding operator.
  std::snprintf(buf, sizeof buf, "(%af)", static_cast<double>(v));
  return buf;
}

std::string IntLiteral(int64_t v) {
  // The most negative value has no positive literal of its own.
  if (v == std::numeric_limits<int64_t>::min()) return "(-9223372036854775807LL - 1)";
  return "(" + std::to_string(v) + "LL)";
}

std::string CType(DType t) {
  switch (t) {
    case DType::kFloat32: return "float";
    case DType::kFloat64: return "double";
    case DType::kInt8: return "signed char";
    case DType::kUInt8: return "unsigned char";
    case DType::kInt16: return "short";
    case DType::kUInt16: return "unsigned short";
    case DType::kInt32: return "int";
    case DType::kUInt32: return "unsigned int";
    case DType::kInt64: return "long long";
    case DType::kBool: return "bool";
    default: return "";
  }
}

std::string WordType(size_t bytes) {
  switch (bytes) {
    case 1: return "unsigned char";
    case 2: return "unsigned short";
    case 4: return "unsigned int";
    case 8: return "unsigned long long";
    default: return "";
  }
}

int64_t GridFor(int64_t elements, int block) {
  // 64K blocks of 256 threads keep an H200's 132 SMs busy many times over; beyond that the
  // grid-stride loop takes the rest.
  constexpr int64_t kMaxBlocks = 65535;
  const int64_t blocks = (std::max<int64_t>(elements, 1) + block - 1) / block;
  return std::min(blocks, kMaxBlocks);
}

int ReductionBlock(int64_t len) {
  int b = 32;
  while (b < 256 && b < len) b *= 2;
  return b;
}

void SourceWriter::Line(const std::string& text) {
  out_.append(static_cast<size_t>(depth_) * 2, ' ');
  out_ += text;
  out_ += '\n';
}

void SourceWriter::Open(const std::string& text) {
  Line(text + " {");
  ++depth_;
}

void SourceWriter::Close(const std::string& tail) {
  --depth_;
  Line("}" + tail);
}

std::string ParamList(const std::vector<KernelParam>& params,
                      const std::vector<std::string>& ctypes) {
  std::string s;
  for (size_t i = 0; i < params.size(); ++i) {
    const KernelParam& p = params[i];
    const bool in = p.kind == KernelParam::Kind::kInput;
    if (!s.empty()) s += ", ";
    // No __restrict__: an element-wise output may be planned over one of its inputs.
    s += (in ? "const " : "") + ctypes[i] + "* p" + std::to_string(i);
  }
  return s;
}

std::string KernelSignature(Kernel& k, const std::vector<std::string>& ctypes) {
  k.param_types = ctypes;
  return "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(k.block) + ") " +
         k.name + "(" + ParamList(k.params, ctypes) + ")";
}

}  // namespace kiln::codegen
