#include "runtime/cpu/build_context.h"

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <optional>

#include "runtime/cpu/strided_copy.h"

namespace kiln::cpu {

using dnnl::memory;

memory::dims ToDims(const std::vector<int64_t>& v) { return memory::dims(v.begin(), v.end()); }

memory::format_tag PlainTag(size_t rank) {
  static const memory::format_tag tags[] = {
      memory::format_tag::undef,  memory::format_tag::a,     memory::format_tag::ab,
      memory::format_tag::abc,    memory::format_tag::abcd,  memory::format_tag::abcde,
      memory::format_tag::abcdef};
  return rank < std::size(tags) ? tags[rank] : memory::format_tag::undef;
}

int BuildContext::SlotOf(const Value* v) const {
  if (!v) return -1;
  auto it = slot_of.find(v->name);
  return it == slot_of.end() ? -1 : it->second;
}

namespace {

// oneDNN's name for a Kiln dtype; f32 for the ones oneDNN has no type for (their slots are
// never handed to a primitive).
memory::data_type DnnlType(DType t) {
  switch (t) {
    case DType::kUInt8: return memory::data_type::u8;
    case DType::kInt8: return memory::data_type::s8;
    case DType::kInt32: return memory::data_type::s32;
    default: return memory::data_type::f32;
  }
}

DType KilnType(memory::data_type t) {
  switch (t) {
    case memory::data_type::u8: return DType::kUInt8;
    case memory::data_type::s8: return DType::kInt8;
    case memory::data_type::s32: return DType::kInt32;
    default: return DType::kFloat32;
  }
}

}  // namespace

int BuildContext::AddTemp(const memory::desc& md) {
  Slot s;
  s.name = "tmp" + std::to_string(slots.size());
  s.dtype = KilnType(md.data_type());
  const memory::dims dims = md.dims();
  s.shape.assign(dims.begin(), dims.end());
  s.storage = Storage::kBlocked;
  s.md = md;
  s.request = static_cast<int>(requests.size());
  requests.push_back({static_cast<int64_t>(md.get_size()), step, step});
  slots.push_back(std::move(s));
  return static_cast<int>(slots.size()) - 1;
}

memory::desc BuildContext::PlainMd(int slot) const {
  const Slot& s = slots[slot];
  // A rank-0 tensor is described as one element: oneDNN has no scalars.
  const memory::data_type t = DnnlType(s.dtype);
  if (s.shape.empty()) return memory::desc({1}, t, memory::format_tag::a);
  return memory::desc(ToDims(s.shape), t, PlainTag(s.shape.size()));
}

memory::desc BuildContext::StoredMd(int slot) const {
  return slots[slot].is_plain() ? PlainMd(slot) : slots[slot].md;
}

void BuildContext::NoteScratchpad(const memory::desc& scratch) {
  scratchpad_bytes = std::max<int64_t>(scratchpad_bytes, scratch.get_size());
}

int BuildContext::ReadAs(int slot, const memory::desc& want) {
  memory::desc have = StoredMd(slot);
  if (have == want) return slot;
  int tmp = AddTemp(want);
  pre->push_back(MakeReorder(*this, slot, have, tmp, want));
  return tmp;
}

int BuildContext::WriteAs(int out, const memory::desc& got) {
  memory::desc plain = PlainMd(out);
  if (got == plain) return out;
  Slot& s = slots[out];
  if (s.blocked_ok && s.storage == Storage::kArena) {
    // Produced and consumed only by conv-family primitives: keep the primitive's layout,
    // in the blocked arena (its size may exceed the plain size the plan reserved).
    s.storage = Storage::kBlocked;
    s.md = got;
    s.request = static_cast<int>(requests.size());
    requests.push_back({static_cast<int64_t>(got.get_size()), step, std::max(step, s.last_step)});
    return out;
  }
  int tmp = AddTemp(got);
  post->push_back(MakeReorder(*this, tmp, got, out, plain));
  return tmp;
}

bool BuildContext::ShareDyingInput(int in, int out, const memory::desc& md) {
  Slot& r = slots[in];
  Slot& y = slots[out];
  // The buffer must die here, not just this value: a layout Transpose's output may share it
  // (layout_transpose.h) and be read later.
  if (r.storage != Storage::kBlocked || !(r.md == md) || r.request < 0 ||
      requests[r.request].last_step != step || !y.blocked_ok || y.storage != Storage::kArena) {
    return false;
  }
  y.storage = Storage::kBlocked;
  y.md = md;
  y.request = r.request;
  requests[r.request].last_step = std::max(requests[r.request].last_step, y.last_step);
  return true;
}

void DnnlCall::Arg(int arg, const memory::desc& md, int slot, const dnnl::engine& eng) {
  mems_.emplace_back(md, eng, static_cast<void*>(nullptr));
  slots_.push_back(slot);
  args_.push_back({arg, mems_.back().get()});
}

void DnnlCall::Owned(int arg, const memory& mem) {
  mems_.push_back(mem);
  slots_.push_back(-1);
  args_.push_back({arg, mem.get()});
}

absl::Status DnnlCall::Execute(const ExecContext& ctx) {
  for (size_t i = 0; i < mems_.size(); ++i) {
    if (slots_[i] < 0) continue;
    if (dnnl_memory_set_data_handle(mems_[i].get(), ctx.ptrs[slots_[i]]) != dnnl_success) {
      return absl::InternalError("oneDNN: set_data_handle failed");
    }
  }
  dnnl_status_t st = dnnl_primitive_execute(prim_.get(), ctx.stream->get(),
                                            static_cast<int>(args_.size()), args_.data());
  if (st != dnnl_success) {
    return absl::InternalError("oneDNN: primitive execution failed (status " +
                               std::to_string(static_cast<int>(st)) + ")");
  }
  return absl::OkStatus();
}

namespace {

// Same desc on both sides: a plain copy (oneDNN's generic reorder is far slower at this).
class CopyKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  CopyKernel(int src, int dst, size_t bytes) : src_(src), dst_(dst), bytes_(bytes) {}
  absl::Status Run(const ExecContext& ctx) override {
    if (ctx.ptrs[src_] != ctx.ptrs[dst_]) std::memcpy(ctx.ptrs[dst_], ctx.ptrs[src_], bytes_);
    return absl::OkStatus();
  }

 private:
  int src_, dst_;
  size_t bytes_;
};

// Between two plain strided layouts (NCHW <-> NHWC): see strided_copy.h for why not oneDNN.
class StridedCopyKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  StridedCopyKernel(int src, int dst, StridedCopy plan) : src_(src), dst_(dst), plan_(plan) {}
  absl::Status Run(const ExecContext& ctx) override {
    plan_.Run(ctx.ptrs[src_], ctx.ptrs[dst_]);
    return absl::OkStatus();
  }

 private:
  int src_, dst_;
  StridedCopy plan_;
};

// The dims and element strides of a desc without blocking, padding or offset.
std::optional<std::vector<int64_t>> PlainStrides(const memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0 ||
      d.offset0 != 0) {
    return std::nullopt;
  }
  for (int i = 0; i < d.ndims; ++i) {
    if (d.padded_dims[i] != d.dims[i]) return std::nullopt;
  }
  return std::vector<int64_t>(d.format_desc.blocking.strides,
                              d.format_desc.blocking.strides + d.ndims);
}

std::optional<StridedCopy> PlanStridedCopy(const memory::desc& src_md,
                                           const memory::desc& dst_md) {
  auto src = PlainStrides(src_md), dst = PlainStrides(dst_md);
  if (!src || !dst || src_md.dims() != dst_md.dims() ||
      src_md.data_type() != dst_md.data_type()) {
    return std::nullopt;
  }
  const memory::dims dims = src_md.dims();
  return StridedCopy::Plan(std::vector<int64_t>(dims.begin(), dims.end()), *src, *dst,
                           memory::data_type_size(src_md.data_type()));
}

class ReorderKernel : public CpuKernel {
 public:
  explicit ReorderKernel(DnnlCall call) : call_(std::move(call)) {}
  absl::Status Run(const ExecContext& ctx) override { return call_.Execute(ctx); }

 private:
  DnnlCall call_;
};

dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeReorder(BuildContext& ctx, int src, const memory::desc& src_md,
                                       int dst, const memory::desc& dst_md) {
  if (src_md == dst_md) return std::make_unique<CopyKernel>(src, dst, src_md.get_size());
  if (auto plan = PlanStridedCopy(src_md, dst_md)) {
    return std::make_unique<StridedCopyKernel>(src, dst, *plan);
  }
  dnnl::reorder::primitive_desc pd(ctx.engine, src_md, ctx.engine, dst_md, UserScratchpad());
  ctx.NoteScratchpad(pd.scratchpad_desc());
  DnnlCall call{dnnl::reorder(pd)};
  call.Arg(DNNL_ARG_FROM, src_md, src, ctx.engine);
  call.Arg(DNNL_ARG_TO, dst_md, dst, ctx.engine);
  call.Arg(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), ctx.scratch_slot, ctx.engine);
  return std::make_unique<ReorderKernel>(std::move(call));
}

namespace {

// The process's prepacked constants, by source address and packed layout (SharedPack). An
// entry is used only while the source buffer it was packed from is alive (the weak owner
// locks to the tensor's own owner): a freed source whose address is reused never matches,
// and constants are immutable while shared. Expired entries are swept as the map doubles.
class SharedPacks {
 public:
  static SharedPacks& Get() {
    static SharedPacks* packs = new SharedPacks();  // never destroyed: engines may outlive main
    return *packs;
  }
  std::shared_ptr<void> Find(const std::string& key, const Tensor& t) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    std::shared_ptr<void> src = it->second.source.lock();
    if (!src || src != t.owner()) return nullptr;
    return it->second.packed.lock();
  }
  void Add(const std::string& key, const Tensor& t, const std::shared_ptr<void>& packed) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_[key] = Entry{t.owner(), packed};
    if (entries_.size() < 2 * swept_size_ + 64) return;
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.packed.expired() || it->second.source.expired() ? entries_.erase(it)
                                                                      : std::next(it);
    }
    swept_size_ = entries_.size();
  }

 private:
  struct Entry {
    std::weak_ptr<void> source, packed;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  size_t swept_size_ = 0;
};

}  // namespace

std::shared_ptr<void> SharedPack(BuildContext& ctx, const Tensor& t, const std::string& layout,
                                 size_t bytes, const std::function<void(void*)>& pack) {
  ctx.weight_bytes += static_cast<int64_t>(bytes);
  std::string key;
  if (t.owner()) {  // a buffer no engine holds (no owner) is never looked up
    const uintptr_t addr = reinterpret_cast<uintptr_t>(t.raw());
    key.assign(reinterpret_cast<const char*>(&addr), sizeof addr);
    key += layout;
  }
  std::shared_ptr<void> packed = key.empty() ? nullptr : SharedPacks::Get().Find(key, t);
  if (packed) {
    ctx.shared_weight_bytes += static_cast<int64_t>(bytes);
  } else {
    // A 64-byte aligned buffer from the IR's allocator, which throws on failure as oneDNN's
    // own allocation did.
    packed = Tensor::Uninitialized(DType::kUInt8, {static_cast<int64_t>(bytes)}).owner();
    pack(packed.get());
    if (!key.empty()) SharedPacks::Get().Add(key, t, packed);
  }
  ctx.packed_weights.push_back(packed);
  return packed;
}

absl::StatusOr<memory> PrepackConstant(BuildContext& ctx, const Tensor& t,
                                       const memory::desc& plain, const memory::desc& want) {
  if (DnnlType(t.dtype()) != plain.data_type() || t.nbytes() != plain.get_size()) {
    return absl::InvalidArgumentError("constant does not match its oneDNN desc");
  }
  std::string layout(reinterpret_cast<const char*>(&plain.data), sizeof plain.data);
  layout.append(reinterpret_cast<const char*>(&want.data), sizeof want.data);
  std::shared_ptr<void> packed =
      SharedPack(ctx, t, layout, want.get_size(), [&](void* dst_bytes) {
        memory src(plain, ctx.engine, const_cast<void*>(t.raw()));
        memory dst(want, ctx.engine, dst_bytes);
        dnnl::stream s(ctx.engine);
        dnnl::reorder(src, dst).execute(s, src, dst);
        s.wait();
      });
  return memory(want, ctx.engine, packed.get());
}

bool IsReferenceImpl(const std::string& impl) { return impl.rfind("ref", 0) == 0; }

bool SamePlacement(const memory::desc& a, const memory::desc& b) {
  const dnnl_memory_desc_t &x = a.data, &y = b.data;
  if (x.ndims != y.ndims || x.format_kind != y.format_kind || x.format_kind != dnnl_blocked ||
      x.offset0 != y.offset0 || x.data_type != y.data_type) {
    return false;
  }
  const auto& bx = x.format_desc.blocking;
  const auto& by = y.format_desc.blocking;
  if (bx.inner_nblks != by.inner_nblks) return false;
  for (int i = 0; i < bx.inner_nblks; ++i) {
    if (bx.inner_blks[i] != by.inner_blks[i] || bx.inner_idxs[i] != by.inner_idxs[i]) return false;
  }
  for (int i = 0; i < x.ndims; ++i) {
    if (x.dims[i] != y.dims[i] || x.padded_dims[i] != y.padded_dims[i] ||
        bx.strides[i] != by.strides[i]) {
      return false;
    }
  }
  return true;
}

memory::desc ChannelLayoutDesc(const std::vector<int64_t>& shape, ChannelLayout layout,
                               int block) {
  using tag = memory::format_tag;
  const size_t r = shape.size();
  const tag last[] = {tag::nwc, tag::nhwc, tag::ndhwc};
  const tag b8[] = {tag::nCw8c, tag::nChw8c, tag::nCdhw8c};
  const tag b16[] = {tag::nCw16c, tag::nChw16c, tag::nCdhw16c};
  const tag t = layout == ChannelLayout::kLast ? last[r - 3] : block == 16 ? b16[r - 3] : b8[r - 3];
  return memory::desc(ToDims(shape), memory::data_type::f32, t);
}

ChannelLayout ChannelLayoutOf(const memory::desc& md, const memory::dims& dims, int block) {
  if (dims.size() < 3 || dims.size() > 5) return ChannelLayout::kOther;
  const std::vector<int64_t> shape(dims.begin(), dims.end());
  if (SamePlacement(md, ChannelLayoutDesc(shape, ChannelLayout::kLast, block))) {
    return ChannelLayout::kLast;
  }
  if (dims[1] % block == 0 &&
      SamePlacement(md, ChannelLayoutDesc(shape, ChannelLayout::kBlocked, block))) {
    return ChannelLayout::kBlocked;
  }
  return ChannelLayout::kOther;
}

ChannelLayout StoredChannelLayout(const BuildContext& ctx, int slot, int* block) {
  const Slot& s = ctx.slots[slot];
  if (s.is_plain() || s.dtype != DType::kFloat32) return ChannelLayout::kOther;
  for (int b : {16, 8}) {
    const ChannelLayout l = ChannelLayoutOf(s.md, ToDims(s.shape), b);
    if (l != ChannelLayout::kOther) {
      *block = b;
      return l;
    }
  }
  return ChannelLayout::kOther;
}

void BuildContext::NoteImplementation(const Node& node, const std::string& impl) {
  if (IsReferenceImpl(impl)) slow_ops.push_back(node.op_type + " (" + impl + ")");
}

bool IsConvFamily(const Node& node) {
  if (node.domain == kKilnDomain) return node.op_type == "FusedConv";
  if (!node.domain.empty()) return false;
  return node.op_type == "Conv" || node.op_type == "QLinearConv" || node.op_type == "MaxPool" || node.op_type == "AveragePool" ||
         node.op_type == "GlobalAveragePool";
}

}  // namespace kiln::cpu
