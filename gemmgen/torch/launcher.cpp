// gemmgen's compiled launcher for PyTorch: the CUDA kernels of the ops gemmgen::gemm (and
// gemmgen::linear over it), gemmgen::scaled_mm (FP8) and gemmgen::scaled_mm_quantized (its
// e4m3 output), gemmgen::grouped_mm,
// gemmgen::scaled_grouped_mm (FP8 experts) and gemmgen::swiglu (the dual GEMM), every one
// through one body (call_op).
//
// A call looks its operand signature up (op, device, dtypes, sizes, strides, 16-byte alignment,
// attributes) in a table of recipes; a hit allocates the output, patches the operands' addresses
// into the recipe's parameter blocks (raw pointers, and tensor maps through
// cuTensorMapReplaceAddress) and launches with cuLaunchKernel (cuLaunchKernelEx where the
// recipe asks for programmatic dependent launch) on PyTorch's current stream: no Python runs.
// A miss calls the op's Python planner, e.g. gemmgen::_plan (through the dispatcher), which
// checks the operands, chooses and builds the kernel and returns the recipe
// as bytes (gemmgen/runtime/recipe.py, Recipe.to_bytes). Operands the kernels do not take go
// to the op's Python reference, e.g. gemmgen::_reference, on every call.
//
// A recipe's scratch memory (split-K partials and counters, repacked operands) is declared as
// workspace slots; each launch takes their buffers from the pool of its (device, stream),
// allocated by PyTorch's caching allocator on that stream, so launches on several streams (or
// in several CUDA graphs) never share them.
//
// Built by gemmgen.torch on first use with the host C++ compiler, against PyTorch's headers
// only (no CUDA headers: libcuda is opened with dlopen), into gemmgen's cache directory.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/stack.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

// Recipes the table holds before it is cleared whole: gemmgen.torch.launcher.RECIPE_LIMIT,
// passed by its build command (the Python side drops the plans it keeps alive at the same
// limit, clearing this table with them).
#ifndef GEMMGEN_RECIPE_LIMIT
#define GEMMGEN_RECIPE_LIMIT 16384
#endif

namespace gemmgen_launcher {

constexpr uint32_t kFormatVersion = 3;     // Recipe.to_bytes
constexpr uint32_t kReference = 0xFFFFFFFFu;  // "launch count" of a recipe that calls _reference
constexpr uint32_t kPatchPointer = 0, kPatchMap = 1;
constexpr size_t kMapBytes = 128;
constexpr uint32_t kMaxOperands = 8;  // addresses one recipe may patch in
constexpr uint32_t kWorkBase = 16;    // patch index of workspace slot 0 (recipe.WORK_BASE)
constexpr uint32_t kMaxSlots = 16;    // workspace slots one recipe may declare
constexpr size_t kPoolLimit = 64;     // workspace pools (streams) kept per device

// ---- the driver, through dlopen ------------------------------------------------------------
using CUresult = int;
using LaunchFn = CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, void*, void**, void**);
// cuLaunchKernelEx: a CUlaunchConfig (below), the function, kernel params, extra.
struct LaunchAttribute {  // CUlaunchAttribute: id, padding to 8 bytes, a 64-byte value union
    int id;
    char pad[4];
    int value;
    char rest[60];
};
struct LaunchConfig {  // CUlaunchConfig
    unsigned grid[3], block[3], smem;
    void* stream;
    LaunchAttribute* attrs;
    unsigned num_attrs;
};
using LaunchExFn = CUresult (*)(const LaunchConfig*, void*, void**, void**);
constexpr int kProgrammaticStreamSerialization = 6;  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_...
using ReplaceFn = CUresult (*)(void*, void*);
using ErrorNameFn = CUresult (*)(CUresult, const char**);
// cuStreamGetCaptureInfo (any version): stream, status, id, then optional outputs (NULL).
using CaptureInfoFn = CUresult (*)(void*, int*, uint64_t*, void*, void*, void*, void*);

struct Driver {
    LaunchFn launch = nullptr;
    LaunchExFn launch_ex = nullptr;
    ReplaceFn replace_address = nullptr;
    ErrorNameFn error_name = nullptr;
    CaptureInfoFn capture_info = nullptr;
};

const Driver& driver() {
    static const Driver d = [] {
        Driver out;
        void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        TORCH_CHECK(lib != nullptr, "gemmgen launcher: cannot open libcuda.so.1: ", dlerror());
        out.launch = reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel"));
        out.launch_ex = reinterpret_cast<LaunchExFn>(dlsym(lib, "cuLaunchKernelEx"));
        out.replace_address = reinterpret_cast<ReplaceFn>(dlsym(lib, "cuTensorMapReplaceAddress"));
        out.error_name = reinterpret_cast<ErrorNameFn>(dlsym(lib, "cuGetErrorName"));
        void* info = dlsym(lib, "cuStreamGetCaptureInfo_v2");
        out.capture_info = reinterpret_cast<CaptureInfoFn>(
            info ? info : dlsym(lib, "cuStreamGetCaptureInfo"));
        TORCH_CHECK(out.launch && out.launch_ex && out.replace_address && out.error_name &&
                    out.capture_info,
                    "gemmgen launcher: libcuda.so.1 lacks cuLaunchKernel(Ex) or "
                    "cuTensorMapReplaceAddress (CUDA 12 or newer is needed)");
        return out;
    }();
    return d;
}

void check(CUresult result, const char* call) {
    if (result == 0) return;
    const char* name = "?";
    driver().error_name(result, &name);
    TORCH_CHECK(false, "gemmgen launcher: ", call, " failed: ", name, " (", result, ")");
}

// ---- recipes -------------------------------------------------------------------------------
struct Patch {
    uint32_t offset, kind, index;
    int64_t delta;
};

struct Launch {
    void* function = nullptr;
    uint32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, smem = 0;
    bool pdl = false;  // programmatic dependent launch (the kernel waits for its predecessor)
    std::vector<uint8_t> params;
    std::vector<Patch> patches;
};

struct Slot {
    uint64_t nbytes = 0;
    bool zero = false;
};

struct Recipe {
    bool reference = false;
    std::vector<Launch> launches;
    std::vector<Slot> slots;  // workspaces: patch index kWorkBase + i
};

template <typename T>
T take(const uint8_t*& p, const uint8_t* end) {
    TORCH_CHECK(p + sizeof(T) <= end, "gemmgen launcher: truncated recipe");
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
}

std::shared_ptr<const Recipe> parse(const at::Tensor& bytes) {
    TORCH_CHECK(bytes.device().is_cpu() && bytes.scalar_type() == at::kByte && bytes.is_contiguous(),
                "gemmgen launcher: the planner must return a contiguous CPU uint8 tensor");
    const uint8_t* p = bytes.data_ptr<uint8_t>();
    const uint8_t* end = p + bytes.numel();
    auto out = std::make_shared<Recipe>();
    TORCH_CHECK(take<uint32_t>(p, end) == kFormatVersion, "gemmgen launcher: recipe format "
                "version mismatch (rebuild the launcher)");
    const uint32_t count = take<uint32_t>(p, end);
    if (count == kReference) {
        out->reference = true;
        return out;
    }
    out->launches.resize(count);
    for (auto& ln : out->launches) {
        ln.function = reinterpret_cast<void*>(take<uint64_t>(p, end));
        for (auto& g : ln.grid) g = take<uint32_t>(p, end);
        for (auto& b : ln.block) b = take<uint32_t>(p, end);
        ln.smem = take<uint32_t>(p, end);
        ln.pdl = (take<uint32_t>(p, end) & 1u) != 0;
        const uint32_t n = take<uint32_t>(p, end);
        TORCH_CHECK(p + n <= end, "gemmgen launcher: truncated recipe");
        ln.params.assign(p, p + n);
        p += n;
        ln.patches.resize(take<uint32_t>(p, end));
        for (auto& pt : ln.patches) {
            pt.offset = take<uint32_t>(p, end);
            pt.kind = take<uint32_t>(p, end);
            pt.index = take<uint32_t>(p, end);
            pt.delta = take<int64_t>(p, end);
            const size_t width = pt.kind == kPatchMap ? kMapBytes : sizeof(uint64_t);
            TORCH_CHECK(pt.offset + width <= n && (pt.index < kMaxOperands ||
                        (pt.index >= kWorkBase && pt.index < kWorkBase + kMaxSlots)),
                        "gemmgen launcher: bad patch");
        }
    }
    out->slots.resize(take<uint32_t>(p, end));
    TORCH_CHECK(out->slots.size() <= kMaxSlots, "gemmgen launcher: too many workspaces");
    for (auto& slot : out->slots) {
        slot.nbytes = take<uint64_t>(p, end);
        slot.zero = take<uint32_t>(p, end) != 0;
    }
    TORCH_CHECK(p == end, "gemmgen launcher: trailing bytes in the recipe");
    for (const auto& ln : out->launches)
        for (const auto& pt : ln.patches)
            TORCH_CHECK(pt.index < kWorkBase || pt.index - kWorkBase < out->slots.size(),
                        "gemmgen launcher: a patch names a workspace the recipe lacks");
    return out;
}

// ---- operand signatures ----------------------------------------------------------------------
void append(std::string& key, int64_t v) {
    key.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

void append(std::string& key, const at::Tensor& t) {
    if (!t.defined()) {
        append(key, -1);
        return;
    }
    append(key, static_cast<int64_t>(t.scalar_type()));
    append(key, static_cast<int64_t>(t.device().type()) * 1024 + t.device().index());
    append(key, t.dim());
    for (int64_t d = 0; d < t.dim(); ++d) {
        append(key, t.size(d));
        append(key, t.stride(d));
    }
    append(key, (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16) == 0);
}

// Whether the last two dimensions of x are row-major / column-major (gemmgen.torch's _is_row
// and _is_col).
bool is_row(const at::Tensor& x) {
    const int64_t rows = x.size(-2), cols = x.size(-1), s0 = x.stride(-2), s1 = x.stride(-1);
    return (cols <= 1 || s1 == 1) && (rows <= 1 || s0 >= std::max<int64_t>(cols, 1));
}

bool is_col(const at::Tensor& x) {
    const int64_t rows = x.size(-2), cols = x.size(-1), s0 = x.stride(-2), s1 = x.stride(-1);
    return (rows <= 1 || s0 == 1) && (cols <= 1 || s1 >= std::max<int64_t>(rows, 1));
}

// The operand as the kernels read it: itself when row- or column-major, else a contiguous copy
// (as gemmgen.torch's Python path does).
at::Tensor row_or_col(const at::Tensor& x) {
    if (x.dim() != 2) return x;
    return is_row(x) || is_col(x) ? x : x.contiguous();
}

class Table {
public:
    std::shared_ptr<const Recipe> find(const std::string& key) const {
        std::shared_lock<std::shared_mutex> lock(mutex_);
        auto it = recipes_.find(key);
        return it == recipes_.end() ? nullptr : it->second;
    }
    void insert(const std::string& key, std::shared_ptr<const Recipe> recipe) {
        std::unique_lock<std::shared_mutex> lock(mutex_);
        if (recipes_.size() >= kLimit) recipes_.clear();
        recipes_.emplace(key, std::move(recipe));
    }
    size_t size() const {
        std::shared_lock<std::shared_mutex> lock(mutex_);
        return recipes_.size();
    }
    void clear() {
        std::unique_lock<std::shared_mutex> lock(mutex_);
        recipes_.clear();
    }

private:
    static constexpr size_t kLimit = GEMMGEN_RECIPE_LIMIT;
    mutable std::shared_mutex mutex_;
    std::unordered_map<std::string, std::shared_ptr<const Recipe>> recipes_;
};

Table& table() {
    static Table t;
    return t;
}

// ---- workspaces -----------------------------------------------------------------------------
// The workspace buffers of each (device, stream): a recipe's slot i takes the pool's buffer
// (i, zero), allocated by PyTorch's caching allocator on that stream (the current stream, on
// which the recipe launches) and zeroed there when the slot asks; one too small is replaced
// (the caching allocator reuses the old block only for later work of the same stream, so
// releasing it is safe). The legacy default stream (handle 0) is one pool, the per-thread
// default stream (2) one per thread. A stream under CUDA-graph capture gets a pool per capture
// (its buffers come from the graph's private memory pool and stay with the graph: a capture's
// pool is never released). Past kPoolLimit pools on a device outside capture the least
// recently used one is released. A caller keeps the buffers' handles until its launches are
// queued (``run``), so a buffer another thread replaces is released only after them.
class Pools {
public:
    // The buffers of ``slots`` for launches on ``stream``: handles the caller keeps until its
    // launches are queued, so that another thread replacing a buffer (a larger slot on the
    // same stream) cannot hand the old memory to a new tensor while a launch still needs it.
    std::vector<at::Tensor> buffers(const c10::Device& device, void* stream,
                                    const std::vector<Slot>& slots) {
        const Key key = key_of(device, stream);
        std::lock_guard<std::mutex> lock(mutex_);
        Pool& pool = pools_[key];
        pool.used = ++tick_;
        std::vector<at::Tensor> out;
        out.reserve(slots.size());
        for (size_t i = 0; i < slots.size(); ++i) {
            at::Tensor& buf = pool.buffers[{static_cast<uint32_t>(i), slots[i].zero}];
            const int64_t want = static_cast<int64_t>(std::max<uint64_t>(slots[i].nbytes, 256));
            if (!buf.defined() || buf.numel() < want) {
                buf = at::empty({want}, at::TensorOptions().dtype(at::kByte).device(device));
                if (slots[i].zero) buf.zero_();
            }
            out.push_back(buf);
        }
        bound(key);
        return out;
    }
    size_t size() {
        std::lock_guard<std::mutex> lock(mutex_);
        return pools_.size();
    }
    void clear() {
        std::lock_guard<std::mutex> lock(mutex_);
        pools_.clear();
    }

private:
    // (device index, stream handle, thread for the per-thread default stream, capturing,
    // capture id)
    using Key = std::tuple<int, uint64_t, size_t, bool, uint64_t>;
    struct Pool {
        uint64_t used = 0;
        std::map<std::pair<uint32_t, bool>, at::Tensor> buffers;
    };

    static Key key_of(const c10::Device& device, void* stream) {
        const uint64_t handle = reinterpret_cast<uint64_t>(stream) == 1
            ? 0 : reinterpret_cast<uint64_t>(stream);  // CU_STREAM_LEGACY is the null stream
        const size_t thread = handle == 2 ? std::hash<std::thread::id>()(std::this_thread::get_id())
                                          : 0;
        bool capturing = false;
        uint64_t id = 0;
        if (handle != 0) {  // the legacy stream cannot capture
            int status = 0;
            // a refused query (another thread's capture) counts as a capture of its own
            capturing = driver().capture_info(stream, &status, &id, nullptr, nullptr, nullptr,
                                              nullptr) != 0 || status != 0;
        }
        return Key{device.index(), handle, thread, capturing, capturing ? id : 0};
    }

    void bound(const Key& fresh) {  // with mutex_ held
        size_t on_device = 0;
        for (const auto& kv : pools_)  // a capture's pool is kept and not counted
            on_device += std::get<0>(kv.first) == std::get<0>(fresh) && !std::get<3>(kv.first);
        while (on_device > kPoolLimit) {
            auto oldest = pools_.end();
            for (auto it = pools_.begin(); it != pools_.end(); ++it) {
                if (std::get<0>(it->first) != std::get<0>(fresh) || it->first == fresh) continue;
                if (std::get<3>(it->first)) continue;  // a capture's: its graph keeps using it
                if (oldest == pools_.end() || it->second.used < oldest->second.used) oldest = it;
            }
            if (oldest == pools_.end()) return;
            pools_.erase(oldest);
            --on_device;
        }
    }

    std::mutex mutex_;
    uint64_t tick_ = 0;
    std::map<Key, Pool> pools_;
};

Pools& pools() {
    static Pools p;
    return p;
}

// ---- launching ------------------------------------------------------------------------------
// Patch the operands' addresses ``ptrs`` and the workspaces of ``stream`` into each launch's
// parameter block and launch it on ``stream`` (the current stream of ``device``, whose context
// must be current: the caller's DeviceGuard).
void run(const Recipe& recipe, const uint64_t* ptrs, const c10::Device& device, void* stream) {
    alignas(128) static thread_local uint8_t block[4096];
    std::vector<at::Tensor> held;  // released after the launches are queued (stream-ordered)
    std::vector<uint64_t> work;
    if (!recipe.slots.empty()) held = pools().buffers(device, stream, recipe.slots);
    for (const auto& t : held) work.push_back(reinterpret_cast<uint64_t>(t.data_ptr()));
    for (const auto& ln : recipe.launches) {
        TORCH_CHECK(ln.params.size() <= sizeof(block), "gemmgen launcher: parameter block too large");
        std::memcpy(block, ln.params.data(), ln.params.size());
        for (const auto& pt : ln.patches) {
            const uint64_t base = pt.index < kWorkBase ? ptrs[pt.index] : work[pt.index - kWorkBase];
            const uint64_t addr = base + static_cast<uint64_t>(pt.delta);
            if (pt.kind == kPatchPointer) {
                std::memcpy(block + pt.offset, &addr, sizeof(addr));
            } else {  // a tensor map: 64-byte aligned in a copy, its address replaced
                alignas(64) uint8_t map[kMapBytes];
                std::memcpy(map, block + pt.offset, kMapBytes);
                check(driver().replace_address(map, reinterpret_cast<void*>(addr)),
                      "cuTensorMapReplaceAddress");
                std::memcpy(block + pt.offset, map, kMapBytes);
            }
        }
        size_t size = ln.params.size();
        void* extra[] = {reinterpret_cast<void*>(1), block, reinterpret_cast<void*>(2), &size,
                         reinterpret_cast<void*>(0)};  // BUFFER_POINTER, BUFFER_SIZE, END
        if (ln.pdl) {
            LaunchAttribute attr{};
            attr.id = kProgrammaticStreamSerialization;
            attr.value = 1;
            const LaunchConfig cfg{{ln.grid[0], ln.grid[1], ln.grid[2]},
                                   {ln.block[0], ln.block[1], ln.block[2]}, ln.smem, stream,
                                   &attr, 1};
            check(driver().launch_ex(&cfg, ln.function, nullptr, extra), "cuLaunchKernelEx");
        } else {
            check(driver().launch(ln.function, ln.grid[0], ln.grid[1], ln.grid[2], ln.block[0],
                                  ln.block[1], ln.block[2], ln.smem, stream, nullptr, extra),
                  "cuLaunchKernel");
        }
    }
}

uint64_t address(const at::Tensor& t) {
    return t.defined() ? reinterpret_cast<uint64_t>(t.data_ptr()) : 0;
}

// The recipe of ``key`` from the table, or from ``plan`` (a call of the op's Python planner,
// which checks the operands and raises for bad ones) on a miss, kept for the next call.
template <typename Plan>
std::shared_ptr<const Recipe> recipe_for(const std::string& key, Plan&& plan) {
    auto recipe = table().find(key);
    if (!recipe) {
        recipe = parse(plan());
        table().insert(key, recipe);
    }
    return recipe;
}

void* current_stream(const c10::Device& device) {
    return c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle();
}

// The one body every op shares. The recipe of the operand signature (``key``: the op's name
// and non-tensor arguments, to which each operand but the output is appended), planned by the
// op's Python planner (``plan``) on first sight; then the PyTorch reference (``reference``)
// where the kernels do not take the operands, nothing for an empty output, or the recipe's
// launches on the current stream with the operands' addresses patched in. ``operands`` lists
// them in the recipe's numbering (0 a, 1 b, 2 the output, then the op's others).
// ``launch_op`` is that body up to the reference, which it leaves to the caller (false).
template <typename PlanFn>
bool launch_op(std::string key, std::initializer_list<const at::Tensor*> operands,
               const at::Tensor& out, PlanFn&& plan) {
    TORCH_CHECK(operands.size() <= kMaxOperands, "gemmgen launcher: more operands than a "
                "recipe numbers");
    for (const at::Tensor* t : operands)
        if (t != &out) append(key, *t);
    auto recipe = recipe_for(key, std::forward<PlanFn>(plan));
    if (recipe->reference) return false;
    if (recipe->launches.empty()) return true;
    uint64_t ptrs[kMaxOperands] = {};
    size_t i = 0;
    for (const at::Tensor* t : operands) ptrs[i++] = address(*t);
    run(*recipe, ptrs, out.device(), current_stream(out.device()));
    return true;
}

template <typename PlanFn, typename ReferenceFn>
at::Tensor call_op(std::string key, std::initializer_list<const at::Tensor*> operands,
                   const at::Tensor& out, PlanFn&& plan, ReferenceFn&& reference) {
    if (!launch_op(std::move(key), operands, out, std::forward<PlanFn>(plan))) return reference();
    return out;
}

// A key beginning with the op's name.
std::string key_of(const char* op) {
    std::string key = op;
    key.push_back('\0');
    return key;
}

// gemmgen::gemm(a, b, bias, epilogue): operands 0 a, 1 b, 2 the output, 3 bias.
at::Tensor gemm_cuda(const at::Tensor& a_in, const at::Tensor& b_in,
                     const std::optional<at::Tensor>& bias_in, c10::string_view epilogue);

// gemmgen::linear(x, weight, bias, activation): F.linear's contract, x (..., K), weight
// (N, K), through gemm on the flattened x and the weight's transposed view.
at::Tensor linear_cuda(const at::Tensor& x, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, c10::string_view activation) {
    TORCH_CHECK(activation == "none" || activation == "relu" || activation == "gelu",
                "activation: unknown '", std::string(activation), "'; known: none, relu, gelu");
    TORCH_CHECK(x.dim() >= 1 && weight.dim() == 2, "x must have at least 1 dimension and "
                "weight 2; got ", x.dim(), " and ", weight.dim());
    std::string epilogue = bias.has_value() ? "bias" : "";
    if (activation != "none") epilogue += (epilogue.empty() ? "" : "_") + std::string(activation);
    if (epilogue.empty()) epilogue = "none";
    const at::Tensor a = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
    at::Tensor y = gemm_cuda(a, weight.t(), bias, epilogue);
    if (x.dim() == 2) return y;
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = weight.size(0);
    return y.view(shape);
}

at::Tensor gemm_cuda(const at::Tensor& a_in, const at::Tensor& b_in,
                     const std::optional<at::Tensor>& bias_in, c10::string_view epilogue) {
    const at::Tensor a = row_or_col(a_in), b = row_or_col(b_in);
    const at::Tensor bias = bias_in.has_value() ? bias_in->contiguous() : at::Tensor();
    c10::DeviceGuard guard(a.device());
    std::string key = key_of("gemm");
    key.append(epilogue.data(), epilogue.size());
    key.push_back('\0');
    const bool shaped = a.dim() == 2 && b.dim() == 2;
    at::Tensor out = at::empty({shaped ? a.size(0) : 0, shaped ? b.size(1) : 0}, a.options());
    std::optional<at::Tensor> bias_arg;
    if (bias.defined()) bias_arg = bias;
    return call_op(key, {&a, &b, &out, &bias}, out, [&] {
        static auto plan = c10::Dispatcher::singleton().findSchemaOrThrow("gemmgen::_plan", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                              c10::string_view, const at::Tensor&)>();
        return plan.call(a, b, bias_arg, epilogue, out);
    }, [&] {
        static auto reference = c10::Dispatcher::singleton()
            .findSchemaOrThrow("gemmgen::_reference", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                              const std::optional<at::Tensor>&, c10::string_view)>();
        return reference.call(a_in, b_in, bias_in, epilogue);
    });
}

// gemmgen::scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum): operands 0 a,
// 1 b, 2 the output, 3 bias, 4 scale_a, 5 scale_b. The planner (gemmgen::_scaled_mm_plan)
// repacks operands that are not K-major inside the recipe, so a and b are passed as they are.
at::Tensor scaled_mm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                          const at::Tensor& scale_b, const std::optional<at::Tensor>& bias_in,
                          std::optional<at::ScalarType> out_dtype, bool use_fast_accum) {
    const at::Tensor bias = bias_in.has_value() ? bias_in->contiguous() : at::Tensor();
    const at::ScalarType out_type = out_dtype.value_or(at::kBFloat16);
    c10::DeviceGuard guard(a.device());
    std::string key = key_of("scaled_mm");
    append(key, static_cast<int64_t>(out_type));
    append(key, static_cast<int64_t>(use_fast_accum));
    const bool shaped = a.dim() == 2 && b.dim() == 2;
    at::Tensor out = at::empty({shaped ? a.size(0) : 0, shaped ? b.size(1) : 0},
                               a.options().dtype(out_type));
    std::optional<at::Tensor> bias_arg;
    if (bias.defined()) bias_arg = bias;
    return call_op(key, {&a, &b, &out, &bias, &scale_a, &scale_b}, out, [&] {
        static auto plan = c10::Dispatcher::singleton()
            .findSchemaOrThrow("gemmgen::_scaled_mm_plan", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, const std::optional<at::Tensor>&,
                              std::optional<at::ScalarType>, bool, const at::Tensor&)>();
        return plan.call(a, b, scale_a, scale_b, bias_arg, out_dtype, use_fast_accum, out);
    }, [&] {
        static auto reference = c10::Dispatcher::singleton()
            .findSchemaOrThrow("gemmgen::_scaled_mm_reference", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, const std::optional<at::Tensor>&,
                              std::optional<at::ScalarType>, bool)>();
        return reference.call(a, b, scale_a, scale_b, bias_in, out_dtype, use_fast_accum);
    });
}

// gemmgen::scaled_mm_quantized(a, b, scale_a, scale_b, bias, scale, block, use_fast_accum):
// scaled_mm with an e4m3 output quantized in the epilogue, returning (q, scales, amax).
// Operands 0 a, 1 b, 2 q, 3 bias, 4 scale_a, 5 scale_b, 6 the scale read (block "tensor") or
// the scales written (block "1x128": M x ceil(N/128), M-major), 7 amax (written by the kernel).
using Quantized = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
Quantized scaled_mm_quantized_cuda(const at::Tensor& a, const at::Tensor& b,
                                   const at::Tensor& scale_a, const at::Tensor& scale_b,
                                   const std::optional<at::Tensor>& bias_in,
                                   const std::optional<at::Tensor>& scale,
                                   c10::string_view block, bool use_fast_accum) {
    const at::Tensor bias = bias_in.has_value() ? bias_in->contiguous() : at::Tensor();
    c10::DeviceGuard guard(a.device());
    std::string key = key_of("scaled_mm_quantized");
    key.append(block.data(), block.size());
    key.push_back('\0');
    append(key, static_cast<int64_t>(use_fast_accum));
    const bool shaped = a.dim() == 2 && b.dim() == 2;
    const int64_t m = shaped ? a.size(0) : 0, n = shaped ? b.size(1) : 0;
    const auto f32 = a.options().dtype(at::kFloat);
    at::Tensor q = at::empty({m, n}, a.options().dtype(at::kFloat8_e4m3fn));
    const bool per_tensor = block == "tensor";
    TORCH_CHECK_VALUE(per_tensor || !scale.has_value(), "scale is for block='tensor'; with 1 x "
                      "128 blocks the kernel computes the scales");
    at::Tensor scales = per_tensor ? at::empty({0}, f32) : at::empty({(n + 127) / 128, m}, f32).t();
    at::Tensor amax = at::empty({1}, f32);  // the kernel writes it whole
    const at::Tensor scale_d = per_tensor ? scale.value_or(at::Tensor()) : scales;
    std::optional<at::Tensor> bias_arg, scale_arg;
    if (bias.defined()) bias_arg = bias;
    if (scale_d.defined()) scale_arg = scale_d;
    const bool launched = launch_op(key, {&a, &b, &q, &bias, &scale_a, &scale_b, &scale_d, &amax},
                                    q, [&] {
        static auto plan = c10::Dispatcher::singleton()
            .findSchemaOrThrow("gemmgen::_scaled_mm_quantized_plan", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, const std::optional<at::Tensor>&,
                              c10::string_view, bool, const at::Tensor&,
                              const std::optional<at::Tensor>&, const at::Tensor&)>();
        return plan.call(a, b, scale_a, scale_b, bias_arg, block, use_fast_accum, q, scale_arg,
                         amax);
    });
    if (launched) {
        if (q.numel() == 0) amax.zero_();  // no launch: the max over nothing
        return {q, scales, amax};
    }
    static auto reference = c10::Dispatcher::singleton()
        .findSchemaOrThrow("gemmgen::_scaled_mm_quantized_reference", "")
        .typed<Quantized(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const at::Tensor&, const std::optional<at::Tensor>&,
                         const std::optional<at::Tensor>&, c10::string_view, bool)>();
    return reference.call(a, b, scale_a, scale_b, bias_in, scale, block, use_fast_accum);
}

// gemmgen::grouped_mm(a, b, offs, out_dtype): operands 0 a, 1 b, 2 the output, 3 offs. The
// operands are laid out as gemmgen.torch.grouped.prepare does (the token matrix row-major,
// the K-grouped a column-major and b row-major, b's matrices either way), the output's shape
// follows torch._grouped_mm's forms; the planner checks everything else.
at::Tensor grouped_mm_cuda(const at::Tensor& a_in, const at::Tensor& b_in,
                           const std::optional<at::Tensor>& offs_in,
                           std::optional<at::ScalarType> out_dtype) {
    const bool ranks = a_in.dim() >= 2 && a_in.dim() <= 3 && b_in.dim() >= 2 && b_in.dim() <= 3;
    at::Tensor a = a_in, b = b_in;
    if (ranks && a.dim() == 2 && b.dim() == 2) {
        if (!is_col(a)) a = a.t().contiguous().t();
        if (!is_row(b)) b = b.contiguous();
    } else if (ranks) {
        if (!is_row(a)) a = a.contiguous();
        if (!is_row(b) && !is_col(b)) b = b.contiguous();
    }
    const at::Tensor offs = offs_in.has_value() ? offs_in->contiguous() : at::Tensor();
    c10::DeviceGuard guard(a.device());
    std::string key = key_of("grouped_mm");
    append(key, out_dtype.has_value() ? static_cast<int64_t>(*out_dtype) : -1);
    std::vector<int64_t> shape{0};
    if (ranks && a.dim() == 2 && b.dim() == 3) shape = {a.size(0), b.size(2)};
    if (ranks && a.dim() == 3 && b.dim() == 3) shape = {a.size(0), a.size(1), b.size(2)};
    if (ranks && a.dim() == 2 && b.dim() == 2 && offs.defined() && offs.dim() == 1)
        shape = {offs.size(0), a.size(0), b.size(1)};
    if (ranks && a.dim() == 3 && b.dim() == 2) shape = {a.size(1), b.size(1)};
    at::Tensor out = at::empty(shape, a.options().dtype(out_dtype.value_or(a.scalar_type())));
    std::optional<at::Tensor> offs_arg;
    if (offs.defined()) offs_arg = offs;
    return call_op(key, {&a, &b, &out, &offs}, out, [&] {
        static auto plan = c10::Dispatcher::singleton()
            .findSchemaOrThrow("gemmgen::_grouped_plan", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                              std::optional<at::ScalarType>, const at::Tensor&)>();
        return plan.call(a, b, offs_arg, out_dtype, out);
    }, [&] {
        static auto reference = c10::Dispatcher::singleton()
            .findSchemaOrThrow("gemmgen::_grouped_reference", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                              const std::optional<at::Tensor>&, std::optional<at::ScalarType>)>();
        return reference.call(a_in, b_in, offs_in, out_dtype);
    });
}

// gemmgen::scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype): FP8 experts with block
// scales, operands 0 a, 1 b, 2 the output, 3 offs, 4 scale_a, 5 scale_b; a row-major (a copy
// otherwise), b the K-major [G, K, N] view as given; the planner checks everything else.
at::Tensor scaled_grouped_mm_cuda(const at::Tensor& a_in, const at::Tensor& b,
                                  const at::Tensor& scale_a, const at::Tensor& scale_b,
                                  const std::optional<at::Tensor>& offs_in,
                                  std::optional<at::ScalarType> out_dtype) {
    const bool ranks = (a_in.dim() == 2 || a_in.dim() == 3) && b.dim() == 3;
    const at::Tensor a = ranks && !is_row(a_in) ? a_in.contiguous() : a_in;
    const at::Tensor offs = offs_in.has_value() ? offs_in->contiguous() : at::Tensor();
    c10::DeviceGuard guard(a.device());
    std::string key = key_of("scaled_grouped_mm");
    append(key, out_dtype.has_value() ? static_cast<int64_t>(*out_dtype) : -1);
    std::vector<int64_t> shape{0};
    if (ranks && a.dim() == 2) shape = {a.size(0), b.size(2)};
    if (ranks && a.dim() == 3) shape = {a.size(0), a.size(1), b.size(2)};
    at::Tensor out = at::empty(shape, a.options().dtype(out_dtype.value_or(at::kBFloat16)));
    std::optional<at::Tensor> offs_arg;
    if (offs.defined()) offs_arg = offs;
    return call_op(key, {&a, &b, &out, &offs, &scale_a, &scale_b}, out, [&] {
        static auto plan = c10::Dispatcher::singleton()
            .findSchemaOrThrow("gemmgen::_scaled_grouped_plan", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, const std::optional<at::Tensor>&,
                              std::optional<at::ScalarType>, const at::Tensor&)>();
        return plan.call(a, b, scale_a, scale_b, offs_arg, out_dtype, out);
    }, [&] {
        static auto reference = c10::Dispatcher::singleton()
            .findSchemaOrThrow("gemmgen::_scaled_grouped_reference", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, const std::optional<at::Tensor>&,
                              std::optional<at::ScalarType>)>();
        return reference.call(a_in, b, scale_a, scale_b, offs_in, out_dtype);
    });
}

// gemmgen::swiglu(x, w_gate, w_up): silu(x w_gate^T) * (x w_up^T) for x (..., K) and the
// nn.Linear weights (N, K), through the dual GEMM (gemmgen.torch.mlp): operands 0 x as (M, K),
// 1 w_gate^T, 2 the output (M, N), 3 w_up^T. The dual GEMM reads a w_up that lies after
// w_gate in place, its tensor map holding the distance, so the key holds where w_up lies from
// w_gate; weights that are not contiguous are stacked into one pair first (a fresh copy's
// address would otherwise change the key on every call). Calls the planner
// (gemmgen::_swiglu_plan) leaves to PyTorch run its formula here, without Python.
at::Tensor swiglu_cuda(const at::Tensor& x, const at::Tensor& w_gate_in,
                       const at::Tensor& w_up_in) {
    c10::DeviceGuard guard(x.device());
    const bool shaped = x.dim() >= 1 && w_gate_in.dim() == 2 && w_up_in.dim() == 2
        && x.size(-1) == w_gate_in.size(1) && w_up_in.sizes() == w_gate_in.sizes();
    at::Tensor w_gate = w_gate_in, w_up = w_up_in;
    if (shaped && w_gate.scalar_type() == w_up.scalar_type() && w_gate.device() == w_up.device()
        && !(w_gate.is_contiguous() && w_up.is_contiguous())) {
        const at::Tensor pair = at::stack({w_gate, w_up});
        w_gate = pair[0];
        w_up = pair[1];
    }
    const at::Tensor x2 = shaped ? row_or_col(x.reshape({-1, x.size(-1)})) : x;
    const at::Tensor b = shaped ? w_gate.t() : w_gate, up = shaped ? w_up.t() : w_up;
    std::string key = key_of("swiglu");
    append(key, static_cast<int64_t>(reinterpret_cast<uintptr_t>(w_up.data_ptr()) -
                                     reinterpret_cast<uintptr_t>(w_gate.data_ptr())));
    at::Tensor out = at::empty({shaped ? x2.size(0) : 0, shaped ? w_gate.size(0) : 0},
                               x.options());
    at::Tensor y = call_op(key, {&x2, &b, &out, &up}, out, [&] {
        static auto plan = c10::Dispatcher::singleton()
            .findSchemaOrThrow("gemmgen::_swiglu_plan", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&)>();
        return plan.call(x2, w_gate, w_up, out);
    }, [&] {
        return at::mul(at::silu(at::linear(x, w_gate_in)), at::linear(x, w_up_in));
    });
    if (!y.is_same(out) || x.dim() == 2) return y;
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = w_gate.size(0);
    return y.view(shape);
}

}  // namespace gemmgen_launcher

TORCH_LIBRARY_IMPL(gemmgen, CUDA, m) {
    m.impl("gemm", &gemmgen_launcher::gemm_cuda);
    m.impl("linear", &gemmgen_launcher::linear_cuda);
    m.impl("scaled_mm", &gemmgen_launcher::scaled_mm_cuda);
    m.impl("scaled_mm_quantized", &gemmgen_launcher::scaled_mm_quantized_cuda);
    m.impl("grouped_mm", &gemmgen_launcher::grouped_mm_cuda);
    m.impl("scaled_grouped_mm", &gemmgen_launcher::scaled_grouped_mm_cuda);
    m.impl("swiglu", &gemmgen_launcher::swiglu_cuda);
}

// For tests and tools: recipes held, and a way to drop them (torch.ops.gemmgen_launcher.*).
int64_t recipes_held() {
    return static_cast<int64_t>(gemmgen_launcher::table().size());
}

int64_t clear_recipes() {
    gemmgen_launcher::table().clear();
    return 0;
}

// Workspace pools held (one per stream and capture that launched a recipe with workspaces).
int64_t workspace_pools() {
    return static_cast<int64_t>(gemmgen_launcher::pools().size());
}

TORCH_LIBRARY(gemmgen_launcher, m) {
    m.def("recipes_held() -> int", &recipes_held);
    m.def("clear_recipes() -> int", &clear_recipes);
    m.def("workspace_pools() -> int", &workspace_pools);
}
