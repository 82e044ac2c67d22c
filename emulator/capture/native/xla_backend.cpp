// The emulated device as a PyTorch backend: tensors on device ``xla`` whose memory is host memory,
// every ATen op that reaches the XLA dispatch key runs the CPU kernel on the same memory and is
// recorded for the step graph, without calling into Python (docs/capture.md).
//
// What PyTorch provides and this file relies on (torch 2.13, c10/ATen headers):
// - a backend key (XLA) with its autograd key (AutogradXLA): autograd runs in C++ above us;
// - a boxed fallback catches every op that has no kernel of its own for the key; composite
//   kernels (CompositeExplicitAutograd) still run first and reach us through their parts;
// - a device-guard implementation per device type, needed by factories and autograd's engine.
#include <torch/extension.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

constexpr c10::DeviceType kDev = c10::DeviceType::XLA;
const c10::Device kDevice(kDev, 0);
const c10::Device kHost(c10::DeviceType::CPU);

// -- device guard: one device, no streams ------------------------------------------------------
struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDev; }
  c10::Device exchangeDevice(c10::Device) const override { return kDevice; }
  c10::Device getDevice() const override { return kDevice; }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};
C10_REGISTER_GUARD_IMPL(XLA, Guard);

// -- memory: host memory handed out as device memory, counted ----------------------------------
std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};
std::atomic<int64_t> g_capacity{INT64_MAX};  // bytes the device may hold (the ledger's room)

void count_alloc(int64_t n) {
  int64_t live = g_live_bytes.fetch_add(n) + n;
  int64_t peak = g_peak_bytes.load();
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
}

// What keeps the host memory of a device storage alive: the host storage (results of host
// kernels) or the host allocation (storages made here); the bytes it counts.
struct Hold {
  c10::Storage storage;
  c10::DataPtr data;
  int64_t nbytes;
  // The bytes [lo, hi) that ops wrote since the last numerical-error check: the extent of the
  // execution's outputs on this storage (lo >= hi: none). Not the whole storage: a host
  // kernel's scalar result may sit in a larger buffer whose other bytes nothing ever wrote.
  int64_t lo = 0, hi = 0;
  c10::ScalarType written_dtype = c10::ScalarType::Undefined;
};

// the live device storages, for the numerical-error check of an execution (non_finite)
std::mutex g_holds_mutex;
std::unordered_set<Hold*> g_holds;

Hold* new_hold(c10::Storage storage, c10::DataPtr data, int64_t nbytes) {
  auto* hold = new Hold{std::move(storage), std::move(data), nbytes};
  count_alloc(nbytes);
  std::lock_guard<std::mutex> lock(g_holds_mutex);
  g_holds.insert(hold);
  return hold;
}

void release(void* ctx) {
  auto* hold = static_cast<Hold*>(ctx);
  {
    std::lock_guard<std::mutex> lock(g_holds_mutex);
    g_holds.erase(hold);
  }
  g_live_bytes.fetch_sub(hold->nbytes);
  delete hold;
}

// Op threads write, the execution's check reads: both under g_holds_mutex.
void mark_written(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || t.numel() == 0) return;
  const c10::DataPtr& ptr = t.storage().data_ptr();
  if (ptr.get_deleter() != &release) return;
  auto* hold = static_cast<Hold*>(ptr.get_context());
  const int64_t item = static_cast<int64_t>(t.itemsize());
  const int64_t lo = t.storage_offset() * item;
  const int64_t hi = static_cast<int64_t>(
      at::detail::computeStorageNbytes(t.sizes(), t.strides(), item, t.storage_offset()));
  std::lock_guard<std::mutex> lock(g_holds_mutex);
  if (hold->lo >= hold->hi) {
    hold->lo = lo;
    hold->hi = hi;
  } else {
    hold->lo = std::min(hold->lo, lo);
    hold->hi = std::max(hold->hi, hi);
  }
  hold->written_dtype = t.scalar_type();
}

[[noreturn]] void out_of_memory(int64_t nbytes);
void first_use();

void check_room(int64_t nbytes) {
  first_use();
  if (nbytes > 0 && g_live_bytes.load() + nbytes > g_capacity.load()) out_of_memory(nbytes);
}

struct DeviceAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    check_room(static_cast<int64_t>(n));
    c10::DataPtr host = c10::GetAllocator(c10::DeviceType::CPU)->allocate(n);
    void* ptr = host.get();
    // uninitialised until an op writes it (mark_written)
    Hold* hold = new_hold(c10::Storage(), std::move(host), static_cast<int64_t>(n));
    return c10::DataPtr(ptr, hold, &release, kDevice);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};
DeviceAllocator g_allocator;

at::Tensor device_tensor(c10::Storage storage, caffe2::TypeMeta dtype, c10::IntArrayRef sizes,
                         c10::IntArrayRef strides, int64_t offset) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage),
                                                    c10::DispatchKeySet(c10::DispatchKey::XLA), dtype);
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return t;
}

// A host tensor over the memory of device tensor ``x`` (same geometry), keeping it alive.
void drop_storage(void* ctx) { delete static_cast<c10::Storage*>(ctx); }

at::Tensor host_alias(const at::Tensor& x) {
  const c10::Storage& st = x.storage();
  c10::DataPtr ptr(st.mutable_data(), new c10::Storage(st), &drop_storage, kHost);
  // resizable: an out= result may be resized by the host kernel (see sync_written)
  c10::Storage host(c10::Storage::use_byte_size_t(), st.nbytes(), std::move(ptr),
                    c10::GetAllocator(c10::DeviceType::CPU), true);
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(host),
                                                    c10::DispatchKeySet(c10::DispatchKey::CPU), x.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(x.sizes(), x.strides(), x.storage_offset());
  return t;
}

// A device tensor for a host kernel's new result (its memory becomes device memory).
at::Tensor adopt(const at::Tensor& host) {
  c10::Storage st = host.storage();
  int64_t n = static_cast<int64_t>(st.nbytes());
  check_room(n);
  void* data = st.mutable_data();
  Hold* hold = new_hold(st, c10::DataPtr(), n);
  c10::Storage dev(c10::Storage::use_byte_size_t(), st.nbytes(),
                   c10::DataPtr(data, hold, &release, kDevice), &g_allocator, true);
  return device_tensor(std::move(dev), host.dtype(), host.sizes(), host.strides(), host.storage_offset());
}

// -- the step graph: one record per op -------------------------------------------------------
struct TensorSig {
  std::vector<int64_t> shape;
  c10::ScalarType dtype;
};

struct OpRecord {
  std::string name;  // "aten.mm"; the transfers: "emulator.host_to_device" / "emulator.device_to_host"
  const c10::OperatorHandle* op;  // nullptr for the transfers
  std::vector<TensorSig> ins, outs;
  std::vector<c10::IValue> args;  // ops that count FLOPs: arguments, tensors as meta tensors
  std::vector<c10::IValue> results;
};

std::mutex g_mutex;
std::vector<OpRecord> g_ops;
std::atomic<bool> g_recording{false};
std::unordered_set<std::string> g_flop_ops;  // operator names ("aten::mm") with a FLOP formula
uint64_t g_hash_a = 1469598103934665603ULL, g_hash_b = 0x9E3779B97F4A7C15ULL;  // under g_mutex

inline void mix(uint64_t v) {
  g_hash_a = (g_hash_a ^ v) * 1099511628211ULL;
  g_hash_b = (g_hash_b ^ (v + 0x9E3779B97F4A7C15ULL + (g_hash_b << 6) + (g_hash_b >> 2))) * 0xff51afd7ed558ccdULL;
}

void mix_sig(const std::vector<TensorSig>& sigs) {
  mix(sigs.size());
  for (const auto& s : sigs) {
    mix(static_cast<uint64_t>(s.dtype));
    mix(s.shape.size());
    for (auto d : s.shape) mix(static_cast<uint64_t>(d));
  }
}

void mix_value(const c10::IValue& v) {
  if (v.isInt()) {
    mix(static_cast<uint64_t>(v.toInt()));
  } else if (v.isBool()) {
    mix(v.toBool() ? 3 : 2);
  } else if (v.isIntList()) {
    for (auto i : v.toIntList()) mix(static_cast<uint64_t>(i));
  } else if (v.isNone()) {
    mix(5);
  }
}

std::unordered_map<const c10::OperatorHandle*, std::string> g_names;
std::mutex g_names_mutex;

const std::string& op_name(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> lock(g_names_mutex);
  auto it = g_names.find(&op);
  if (it != g_names.end()) return it->second;
  std::string name = op.schema().name();
  auto pos = name.find("::");
  if (pos != std::string::npos) name.replace(pos, 2, ".");
  return g_names.emplace(&op, name).first->second;
}

uint64_t name_hash(const std::string& s) { return std::hash<std::string>{}(s); }

at::Tensor as_meta(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

c10::IValue meta_value(const c10::IValue& v) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    return t.defined() ? c10::IValue(as_meta(t)) : v;
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(as_meta(t));
    return out;
  }
  return v;
}

void record(OpRecord rec) {
  std::lock_guard<std::mutex> lock(g_mutex);
  mix(name_hash(rec.name));
  mix_sig(rec.ins);
  mix_sig(rec.outs);
  for (const auto& a : rec.args) mix_value(a);
  g_ops.push_back(std::move(rec));
}

void add_sig(std::vector<TensorSig>& out, const at::Tensor& t) {
  if (!t.defined()) return;
  out.push_back(TensorSig{t.sizes().vec(), t.scalar_type()});
}

// -- the fallback: every op on device tensors ---------------------------------------------------
bool on_device(const at::Tensor& t) { return t.defined() && t.device().type() == kDev; }

struct Unwrapped {
  std::vector<at::Tensor> originals;  // device tensors of the arguments
  std::vector<at::Tensor> aliases;    // their host aliases, in the same order
};

at::Tensor unwrap_tensor(const at::Tensor& t, Unwrapped& u) {
  if (!on_device(t)) return t;
  for (size_t i = 0; i < u.originals.size(); ++i)
    if (u.originals[i].is_same(t)) return u.aliases[i];
  at::Tensor alias = host_alias(t);
  u.originals.push_back(t);
  u.aliases.push_back(alias);
  return alias;
}

// A result of the host kernel as a device tensor: the argument itself (in-place and out=
// results), a view of an argument's device storage, or new device memory.
at::Tensor rewrap(const at::Tensor& out, const Unwrapped& u) {
  if (!out.defined() || out.device().type() != c10::DeviceType::CPU) return out;
  for (size_t i = 0; i < u.aliases.size(); ++i)
    if (u.aliases[i].is_same(out)) return u.originals[i];
  const c10::StorageImpl* impl = out.storage().unsafeGetStorageImpl();
  for (size_t i = 0; i < u.aliases.size(); ++i)
    if (u.aliases[i].storage().unsafeGetStorageImpl() == impl)
      return device_tensor(u.originals[i].storage(), out.dtype(), out.sizes(), out.strides(), out.storage_offset());
  return adopt(out);
}

// After the host kernel: a written argument whose host alias it resized or re-pointed (out=
// results, resize_) takes the alias's memory and geometry.
void sync_written(const Unwrapped& u) {
  for (size_t i = 0; i < u.aliases.size(); ++i) {
    const at::Tensor& alias = u.aliases[i];
    const at::Tensor& dev = u.originals[i];
    c10::TensorImpl* impl = dev.unsafeGetTensorImpl();
    if (alias.storage().data() != dev.storage().data()) {
      c10::Storage host = alias.storage();
      int64_t n = static_cast<int64_t>(host.nbytes());
      check_room(n);
      void* data = host.mutable_data();
      Hold* hold = new_hold(host, c10::DataPtr(), n);
      c10::StorageImpl* storage = dev.storage().unsafeGetStorageImpl();  // views see it too
      storage->set_data_ptr_noswap(c10::DataPtr(data, hold, &release, kDevice));
      storage->set_nbytes(host.nbytes());
    }
    if (alias.sizes() != dev.sizes() || alias.strides() != dev.strides() ||
        alias.storage_offset() != dev.storage_offset())
      impl->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
  }
}

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t base = stack->size() - nargs;
  const bool rec = g_recording.load(std::memory_order_relaxed);
  Unwrapped u;
  std::vector<TensorSig> ins;
  bool to_host = false, to_device = false;
  bool has_device_arg = false;
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[base + i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (rec) add_sig(ins, t);
      v = unwrap_tensor(t, u);
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list = v.toTensorList();
      c10::List<at::Tensor> host;
      host.reserve(list.size());
      for (const at::Tensor& t : list) {
        if (rec) add_sig(ins, t);
        host.push_back(unwrap_tensor(t, u));
      }
      v = host;
    } else if (v.isList() && schema.arguments()[i].type()->str() == "Tensor?[]") {
      c10::List<std::optional<at::Tensor>> list = v.to<c10::List<std::optional<at::Tensor>>>();
      c10::List<std::optional<at::Tensor>> host;
      for (const std::optional<at::Tensor>& t : list) {
        if (t.has_value()) {
          if (rec) add_sig(ins, *t);
          host.push_back(unwrap_tensor(*t, u));
        } else {
          host.push_back(std::nullopt);
        }
      }
      v = host;
    } else if (v.isDevice()) {
      has_device_arg = true;
      if (v.toDevice().type() == kDev) {
        to_device = true;
        v = c10::IValue(kHost);
      } else {
        to_host = true;
      }
    }
  }
  std::string name = op_name(op);
  std::vector<c10::IValue> args;
  if (rec && g_flop_ops.count(schema.name())) {
    args.reserve(nargs);
    for (size_t i = 0; i < nargs; ++i) args.push_back(meta_value((*stack)[base + i]));
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  if (schema.is_mutable()) {
    sync_written(u);
    for (const at::Tensor& t : u.originals) mark_written(t);
  }
  const size_t nret = schema.returns().size();
  const size_t rbase = stack->size() - nret;
  std::vector<TensorSig> outs;
  std::vector<c10::IValue> results;
  const bool keep_host = has_device_arg && to_host && !to_device;
  for (size_t i = 0; i < nret; ++i) {
    c10::IValue& v = (*stack)[rbase + i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (rec) add_sig(outs, t);
      if (!keep_host) {
        v = rewrap(t, u);
        mark_written(v.toTensor());
      }
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list = v.toTensorList();
      c10::List<at::Tensor> dev;
      for (const at::Tensor& t : list) {
        if (rec) add_sig(outs, t);
        dev.push_back(keep_host ? t : rewrap(t, u));
        if (!keep_host) mark_written(dev.get(dev.size() - 1));
      }
      v = dev;
    }
    if (!args.empty()) results.push_back(meta_value(v));
  }
  if (rec) {
    if (keep_host) name = "emulator.device_to_host";
    // host tensors made into device tensors (.to(device) is _to_copy with device=xla)
    else if (to_device && u.originals.empty() && !ins.empty()) name = "emulator.host_to_device";
    record(OpRecord{std::move(name), &op, std::move(ins), std::move(outs), std::move(args), std::move(results)});
  }
}

// copy_ between host and device memory is a transfer; on the device, an op like any other
at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  const bool dst_dev = on_device(self), src_dev = on_device(src);
  at::Tensor host_self = dst_dev ? host_alias(self) : self;
  at::Tensor host_src = src_dev ? host_alias(src) : src;
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    host_self.copy_(host_src, non_blocking);
  }
  if (dst_dev) mark_written(self);
  if (g_recording.load(std::memory_order_relaxed)) {
    const char* name = dst_dev && src_dev ? "aten.copy_" : (dst_dev ? "emulator.host_to_device" : "emulator.device_to_host");
    std::vector<TensorSig> ins, outs;
    add_sig(ins, self);
    add_sig(ins, src);
    add_sig(outs, self);
    record(OpRecord{name, nullptr, std::move(ins), std::move(outs), {}, {}});
  }
  return self;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>,
                               std::optional<at::MemoryFormat> memory_format) {
  auto st = dtype.value_or(at::get_default_dtype_as_scalartype());
  at::Tensor t = at::detail::empty_generic(size, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::XLA), st,
                                           memory_format);
  return t;
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>) {
  auto st = dtype.value_or(at::get_default_dtype_as_scalartype());
  at::Tensor t = at::detail::empty_strided_generic(size, stride, &g_allocator,
                                                   c10::DispatchKeySet(c10::DispatchKey::XLA), st);
  return t;
}

// Ops with a composite kernel (CompositeExplicitAutograd) would run it on the XLA key and reach
// the fallback only through their parts (layer_norm as batch_norm, clone as copy_, addmm as
// mm + add_): torch_xla lowers such ops whole, and so does the Python device layer. Route them
// to the fallback too, so the graph holds the ops the program called.
std::unique_ptr<torch::Library> g_composites;

int64_t catch_composites() {
  if (g_composites) return 0;
  g_composites = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::XLA,
                                                  __FILE__, __LINE__);
  const std::unordered_set<std::string> own = {"copy_", "empty", "empty_strided"};
  int64_t n = 0;
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    std::string bare = name.name.substr(6);
    if (own.count(bare)) continue;
    auto op = dispatcher.findSchema(name);
    if (!op.has_value() || op->hasKernelForDispatchKey(c10::DispatchKey::XLA)) continue;
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))
      continue;
    std::string qualified = name.overload_name.empty() ? bare : bare + "." + name.overload_name;
    g_composites->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&fallback>());
    ++n;
  }
  return n;
}

// -- Python ------------------------------------------------------------------------------------
// Python callable (bytes) -> exception to raise, set by the ledger; never released (it would be
// released after the interpreter at exit)
pybind11::object* g_oom = nullptr;

[[noreturn]] void out_of_memory(int64_t nbytes) {
  if (g_oom) {
    pybind11::gil_scoped_acquire gil;
    pybind11::object err = (*g_oom)(nbytes);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
    python_error error;
    error.persist();
    throw error;
  }
  TORCH_CHECK(false, "NRT_RESOURCE: out of device memory allocating ", nbytes, " bytes");
}

// Python callable run once, at the first device allocation after it is set (the torch_xla shim
// attaches the process to the emulated instance then: docs/run-your-script.md); if it raises,
// the allocation fails with its exception and the next allocation calls it again.
pybind11::object* g_first_use = nullptr;
std::atomic<bool> g_first_use_due{false};

void first_use() {
  if (!g_first_use_due.load(std::memory_order_relaxed) || !g_first_use_due.exchange(false)) return;
  pybind11::gil_scoped_acquire gil;
  try {
    (*g_first_use)();
  } catch (pybind11::error_already_set& e) {
    g_first_use_due.store(true);
    e.restore();
    python_error error;
    error.persist();
    throw error;
  }
}

pybind11::tuple sigs_to_py(const std::vector<TensorSig>& sigs) {
  pybind11::tuple out(sigs.size());
  for (size_t i = 0; i < sigs.size(); ++i) {
    pybind11::tuple shape(sigs[i].shape.size());
    for (size_t j = 0; j < sigs[i].shape.size(); ++j) shape[j] = sigs[i].shape[j];
    out[i] = pybind11::make_tuple(
        shape, pybind11::reinterpret_borrow<pybind11::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(sigs[i].dtype))));
  }
  return out;
}

// Whether the floating-point values ops wrote since the last check (the execution's outputs)
// hold a NaN or an infinity: what the runtime reports as a numerical error.
bool non_finite() {
  std::lock_guard<std::mutex> lock(g_holds_mutex);
  bool found = false;
  for (Hold* hold : g_holds) {
    const int64_t lo = hold->lo, hi = std::min(hold->hi, hold->nbytes);
    const c10::ScalarType dtype = hold->written_dtype;
    hold->lo = hold->hi = 0;
    if (found || lo >= hi || dtype == c10::ScalarType::Undefined || !c10::isFloatingType(dtype)) continue;
    const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t first = lo / item, n = hi / item - first;
    if (n <= 0) continue;
    auto* data = static_cast<char*>(hold->data.get() != nullptr ? hold->data.get() : hold->storage.mutable_data());
    at::Tensor t = at::from_blob(data + first * item, {n}, at::TensorOptions().dtype(dtype).device(kHost));
    if (!at::isfinite(t).all().item<bool>()) found = true;
  }
  return found;
}

// A host tensor over a device tensor's memory: what the host-side collectives (gloo) work on.
at::Tensor host_view(const at::Tensor& t) {
  TORCH_CHECK(on_device(t), "host_view: not a tensor on the emulated device");
  return host_alias(t);
}

std::vector<OpRecord> g_taken;  // the last graph taken, until its records are read

// (key, number of ops) of the ops recorded since the last call; starts a new graph
pybind11::tuple take_graph() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_taken.swap(g_ops);
  g_ops.clear();
  pybind11::tuple key = pybind11::make_tuple(g_hash_a, g_hash_b, g_taken.size());
  g_hash_a = 1469598103934665603ULL;
  g_hash_b = 0x9E3779B97F4A7C15ULL;
  return key;
}

// the records of the graph last taken: [(name, ins, outs, op or None, args, results)]
pybind11::list taken_records() {
  pybind11::list out;
  for (const auto& r : g_taken) {
    pybind11::object op = pybind11::none();
    pybind11::list args, results;
    if (r.op != nullptr && !r.args.empty()) {
      op = pybind11::make_tuple(r.op->schema().name(), r.op->schema().overload_name());
      for (const auto& a : r.args) args.append(torch::jit::toPyObject(a));
      for (const auto& a : r.results) results.append(torch::jit::toPyObject(a));
    }
    out.append(pybind11::make_tuple(r.name, sigs_to_py(r.ins), sigs_to_py(r.outs), op, args, results));
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(_, XLA, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

TORCH_LIBRARY_IMPL(aten, XLA, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("copy_", TORCH_FN(copy_));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("set_recording", [](bool on) { g_recording.store(on); });
  m.def("set_flop_ops", [](const std::vector<std::string>& names) {
    g_flop_ops = std::unordered_set<std::string>(names.begin(), names.end());
  });
  m.def("set_capacity", [](int64_t bytes) { g_capacity.store(bytes); });
  m.def("set_out_of_memory", [](pybind11::object f) { g_oom = new pybind11::object(std::move(f)); });
  m.def("set_first_use", [](pybind11::object f) {
    g_first_use = new pybind11::object(std::move(f));  // kept for the process (see g_oom)
    g_first_use_due.store(true);
  });
  m.def("live_bytes", []() { return g_live_bytes.load(); });
  m.def("peak_bytes", []() { return g_peak_bytes.load(); });
  m.def("take_graph", &take_graph);
  m.def("pending_ops", []() {  // ops recorded since the last take_graph (a collective's position)
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_ops.size();
  });
  m.def("catch_composites", &catch_composites);
  m.def("non_finite", []() {
    pybind11::gil_scoped_release nogil;
    return non_finite();
  });
  m.def("host_view", &host_view);
  m.def("taken_records", &taken_records);
}
