// The CUDA executor: one device arena from the memory plan; each distinct kernel compiled once
// (NVRTC behind the disk cache) and loaded once; each node's parameters packed once. A step is
// either a tight loop of cuLaunchKernel over the pre-bound nodes (LaunchMode::Launch) or one
// cuGraphLaunch per layer and direction of CUDA graphs built from the KernelGraph's real
// dependencies (LaunchMode::Graph). Timing per layer: host µs spent issuing, device µs between
// events recorded around it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "compiler/analysis/launch_geometry.h"
#include "compiler/base/check.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/launch_abi.h"
#include "compiler/codegen/nvrtc.h"
#include "graph/resources.h"
#include "graph/runtime/cuda_driver.h"
#include "graph/runtime/cupti.h"
#include "graph/runtime/executor.h"
#include "graph/runtime/graph_topology.h"
#include "graph/runtime/pdl_policy.h"

namespace tilerun::graph {

namespace {

using Clock = std::chrono::steady_clock;

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(const KernelGraph& g, const Model& model, const SessionOptions& options,
               CompileStats& stats)
      : graph_(g),
        model_(model),
        mode_(options.mode),
        pdl_(options.pdl),
        cupti_(options.profile),
        tool_(attached_cuda_tool()) {
    std::string why;
    d_ = cuda_driver(&why);
    if (!d_) throw Error(why, ErrorKind::Runtime);
    // A failure part way (out of memory, a module that does not load, a graph that does not
    // instantiate) releases whatever was made so far: no destructor runs for a constructor that
    // throws.
    try {
      acquire(g, options, stats);
    } catch (...) {
      release();
      throw;
    }
  }

  ~CudaExecutor() override { release(); }

  // The constructor's work: every handle it makes is recorded in a member as soon as it exists,
  // so release() frees it on any path.
  void acquire(const KernelGraph& g, const SessionOptions& options, CompileStats& stats) {
    check(d_->cuDeviceGet(&device_, 0), "cuDeviceGet", "device 0");
    check(d_->cuDevicePrimaryCtxRetain(&ctx_, device_), "cuDevicePrimaryCtxRetain", "device 0");
    check(d_->cuCtxSetCurrent(ctx_), "cuCtxSetCurrent", "device 0");
    // A model too large for the GPU is refused before compiling, naming what it needs.
    size_t free_bytes = 0, total_bytes = 0;
    check(d_->cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo", "device 0");
    require_memory(std::max<int64_t>(g.plan.arena_bytes, 256), static_cast<int64_t>(free_bytes),
                   "model '" + model_.name + "'", "the arena, device memory");

    auto start = Clock::now();
    std::vector<compiler::CudaBinary> binaries(g.kernels.size());
    const std::string cache = compiler::default_cache_dir();
    compile_kernels(g, options, stats, [&](size_t i, const compiler::SimtKernel& k) {
      binaries[i] = compiler::compile_cuda(k, cache);
    });
    const auto load_start = Clock::now();
    for (size_t k = 0; k < binaries.size(); ++k) {
      CUmodule module = nullptr;
      CUfunction fn = nullptr;
      const std::string what = "kernel " + g.kernels[k]->sig.name;
      check(d_->cuModuleLoadData(&module, binaries[k].cubin.data()), "cuModuleLoadData", what);
      modules_.push_back(module);
      check(d_->cuModuleGetFunction(&fn, module, binaries[k].name.c_str()), "cuModuleGetFunction",
            what);
      // A kernel with more than 48 KiB of shared memory opts in to it once, at load.
      const int64_t dyn = binaries[k].dynamic_shared;
      if (dyn > 0)
        check(d_->cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(dyn)),
              "cuFuncSetAttribute", what);
      functions_.push_back(fn);
      tensor_maps_.push_back(binaries[k].tensor_maps);
      dynamic_shared_.push_back(static_cast<unsigned>(dyn));
    }
    stats.compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    stats.load_ms = std::chrono::duration<double, std::milli>(Clock::now() - load_start).count();
    stats.kernels_distinct = static_cast<int>(binaries.size());
    stats.kernels_total = static_cast<int>(g.nodes.size());

    const size_t arena = static_cast<size_t>(std::max<int64_t>(g.plan.arena_bytes, 256));
    check(d_->cuMemAlloc(&arena_, arena), "cuMemAlloc", "the arena");
    // Every copy and memset goes on stream_ and is waited for there. The synchronous driver
    // calls (cuMemsetD8, cuMemcpyHtoD from pageable memory, cuMemcpyDtoD) run on the legacy
    // stream and may still be in flight when they return, and a CU_STREAM_NON_BLOCKING stream
    // does not wait for the legacy stream: on the H200, with eight processes sharing the GPU, a
    // step read inputs before their copy landed (wrong bits from some byte on).
    check(d_->cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate", "the stream");
    check(d_->cuMemsetD8Async(arena_, 0, arena, stream_), "cuMemsetD8Async", "the arena");
    check(d_->cuStreamSynchronize(stream_), "cuStreamSynchronize", "the arena");

    for (const KernelNode& node : g.nodes) {
      const compiler::KernelSignature& sig = g.kernels[node.kernel]->sig;
      compiler::KernelArgs args{.buffers = {}, .dims = node.dims, .scalars = node.scalars};
      for (int t : node.buffers)
        args.buffers.push_back(reinterpret_cast<void*>(arena_ + g.plan.offsets[t]));
      geometry_.push_back(compiler::launch_geometry(sig, node.dims));
      params_.push_back(compiler::pack_cuda_params(
          sig, args, tensor_maps_[node.kernel],
          [&](const compiler::TensorMapParam& m, void* address, const std::vector<int64_t>& dims) {
            return encode_tensor_map(sig, m, address, dims);
          }));
    }
    // The facts the PDL policy (pdl_policy.h) decides each edge from.
    int sms = 0;
    check(d_->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_),
          "cuDeviceGetAttribute", "device 0");
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const compiler::LaunchGeometry& geo = geometry_[i];
      int per_sm = 0;
      if (!geo.empty())
        check(d_->cuOccupancyMaxActiveBlocksPerMultiprocessor(
                  &per_sm, functions_[g.nodes[i].kernel], static_cast<int>(geo.threads),
                  dynamic_shared_[g.nodes[i].kernel]),
              "cuOccupancyMaxActiveBlocksPerMultiprocessor", kernel_name(static_cast<int>(i)));
      pdl_facts_.push_back(pdl_facts(*g.kernels[g.nodes[i].kernel], geo, per_sm, sms));
    }
    groups_ = group_nodes(g);
    for (size_t i = 0; i < groups_.size(); ++i) {
      events_.push_back({nullptr, nullptr});
      check(d_->cuEventCreate(&events_.back().first, CU_EVENT_DEFAULT), "cuEventCreate", "timing");
      check(d_->cuEventCreate(&events_.back().second, CU_EVENT_DEFAULT), "cuEventCreate", "timing");
    }
    if (mode_ == LaunchMode::Graph) {
      // The kernels the most work waits on first (graph_topology.h urgency), over the device's
      // range of stream priorities. A hint to the block scheduler only; the edges alone order
      // the kernels, so the bits cannot change.
      int least = 0, greatest = 0;
      check(d_->cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange",
            "the graphs' priorities");
      for (double u : urgency(g))
        priorities_.push_back(least + static_cast<int>(std::lround(u * (greatest - least))));
      for (const Group& grp : groups_) build_graph(grp);
    }
  }

  // A tensor map for a kernel's tma_copy (launch_abi.h TensorMapParam): the tensor row-major at
  // `address`, its box landing in shared memory under the tensor core's swizzle, zeros outside.
  compiler::TensorMapBytes encode_tensor_map(const compiler::KernelSignature& sig,
                                             const compiler::TensorMapParam& m, void* address,
                                             const std::vector<int64_t>& dims) const {
    CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    switch (m.dtype) {
      case DType::BF16:
        type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
        break;
      case DType::F16:
        type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
        break;
      case DType::F32:
        type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
        break;
      case DType::I32:
        type = CU_TENSOR_MAP_DATA_TYPE_INT32;
        break;
      case DType::I64:
        type = CU_TENSOR_MAP_DATA_TYPE_INT64;
        break;
      default:
        type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
        break;  // one-byte formats move as bytes
    }
    const int64_t elem = dtype_bytes(m.dtype, 1);
    const size_t rank = dims.size();
    // Innermost first, as the driver counts.
    cuuint64_t size[5] = {}, stride[4] = {};
    cuuint32_t box[5] = {}, step[5] = {};
    int64_t pitch = elem;
    for (size_t d = 0; d < rank; ++d) {
      const size_t from_end = rank - 1 - d;
      size[d] = static_cast<cuuint64_t>(std::max<int64_t>(dims[from_end], 1));
      box[d] = static_cast<cuuint32_t>(m.box[from_end]);
      step[d] = 1;
      if (d > 0) stride[d - 1] = static_cast<cuuint64_t>(pitch);
      pitch *= std::max<int64_t>(dims[from_end], 1);
    }
    const CUtensorMapSwizzle swizzle = m.swizzle_bytes == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                       : m.swizzle_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                               : CU_TENSOR_MAP_SWIZZLE_32B;
    CUtensorMap map{};
    check(d_->cuTensorMapEncodeTiled(&map, type, static_cast<cuuint32_t>(rank), address, size,
                                     stride, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
          "cuTensorMapEncodeTiled",
          "kernel " + sig.name + ", the tensor map of '" +
              sig.buffers[static_cast<size_t>(m.buffer)].name + "'");
    compiler::TensorMapBytes out;
    static_assert(sizeof(map) == sizeof(out));
    std::memcpy(out.data(), &map, sizeof(map));
    return out;
  }

  // Frees every handle made so far (results ignored: on a failed device they fail too).
  void release() {
    if (!ctx_) return;
    d_->cuCtxSetCurrent(ctx_);
    if (stream_) d_->cuStreamSynchronize(stream_);
    for (auto& [graph, exec] : graphs_) {
      if (exec) d_->cuGraphExecDestroy(exec);
      if (graph) d_->cuGraphDestroy(graph);
    }
    for (auto& [a, b] : events_) {
      if (a) d_->cuEventDestroy(a);
      if (b) d_->cuEventDestroy(b);
    }
    if (stream_) d_->cuStreamDestroy(stream_);
    if (arena_) d_->cuMemFree(arena_);
    for (CUmodule m : modules_) d_->cuModuleUnload(m);
    d_->cuDevicePrimaryCtxRelease(device_);
    graphs_.clear();
    events_.clear();
    modules_.clear();
    stream_ = nullptr;
    arena_ = 0;
    ctx_ = nullptr;
  }

  std::string device_name() const override { return "cuda"; }

  void write_tensor(int tensor, const void* data, int64_t bytes) override {
    ensure_usable();
    check(d_->cuMemcpyHtoDAsync(arena_ + graph_.plan.offsets[tensor], data,
                                static_cast<size_t>(bytes), stream_),
          "cuMemcpyHtoDAsync", "tensor " + graph_.ops.tensors[tensor].name);
    check(d_->cuStreamSynchronize(stream_), "cuStreamSynchronize", "a tensor write");
  }
  void write_tensor_from_device(int tensor, const void* device_ptr, int64_t bytes) override {
    const std::string& name = graph_.ops.tensors[tensor].name;
    if (reinterpret_cast<uintptr_t>(device_ptr) % 16 != 0)
      throw Error("tensor '" + name + "': device pointer " +
                  std::to_string(reinterpret_cast<uintptr_t>(device_ptr)) +
                  " is not 16-byte aligned");
    ensure_usable();
    check(d_->cuMemcpyDtoDAsync(arena_ + graph_.plan.offsets[tensor],
                                reinterpret_cast<CUdeviceptr>(device_ptr),
                                static_cast<size_t>(bytes), stream_),
          "cuMemcpyDtoDAsync", "tensor " + name);
    check(d_->cuStreamSynchronize(stream_), "cuStreamSynchronize", "a tensor write");
  }
  void read_tensor(int tensor, void* data, int64_t bytes) const override {
    ensure_usable();
    check(d_->cuMemcpyDtoHAsync(data, arena_ + graph_.plan.offsets[tensor],
                                static_cast<size_t>(bytes), stream_),
          "cuMemcpyDtoHAsync", "tensor " + graph_.ops.tensors[tensor].name);
    check(d_->cuStreamSynchronize(stream_), "cuStreamSynchronize", "a tensor read");
  }

  // Every kernel of `direction` once, standalone and without PDL, so each kernel's duration is
  // its own, queued behind a hold kernel that keeps the GPU busy while the host issues the pass
  // (otherwise every kernel would wait for its own launch). Durations from CUPTI activity
  // records (the GPU's timestamps) where libcupti is there, else from events around each
  // launch, which add a few µs to 1-5 µs kernels.
  std::vector<double> profile(Direction direction) override {
    ensure_usable();
    std::vector<int> which;
    for (int i = 0; i < static_cast<int>(graph_.nodes.size()); ++i)
      if (graph_.nodes[i].direction == direction && !geometry_[i].empty()) which.push_back(i);
    std::string why = "CUPTI turned off: SessionOptions::profile";
    bool cupti_ran = false;  // the kernels ran once under CUPTI
    if (CuptiKernelTimer* cupti = cupti_ ? CuptiKernelTimer::get(&why) : nullptr) {
      if (cupti->start(&why)) {
        cupti_ran = true;
        try {
          hold(20000 + 5000 * static_cast<unsigned long long>(which.size()));
          for (int i : which) launch(i, false);
          check(d_->cuStreamSynchronize(stream_), "cuStreamSynchronize", "profiling");
        } catch (...) {
          cupti->stop();  // no activity collection left running after a failed pass
          throw;
        }
        std::vector<KernelRecord> records = cupti->stop();
        std::erase_if(records, [](const KernelRecord& r) { return r.name == "tilerun_hold"; });
        if (records.size() == which.size()) {
          std::vector<double> us(graph_.nodes.size(), 0.0);
          for (size_t k = 0; k < which.size(); ++k) us[which[k]] = records[k].us;
          profile_source_ = "CUPTI activity records";
          return us;
        }
        why = "CUPTI returned " + std::to_string(records.size()) + " kernel records for " +
              std::to_string(which.size()) + " launches";
      }
    }
    profile_source_ = "events around each launch (" + why + ")";
    // The CUPTI pass may have run the direction already. Forward kernels recompute everything
    // from the bound tensors, but backward kernels read forward activations whose bytes the
    // plan hands to later backward tensors: a second backward pass would read those instead
    // and leave wrong gradients. The forward runs again first, untimed, so the pass starts from
    // the state a step leaves.
    if (direction == Direction::Backward && cupti_ran) {
      for (int i = 0; i < static_cast<int>(graph_.nodes.size()); ++i)
        if (graph_.nodes[i].direction == Direction::Forward && !geometry_[i].empty())
          launch(i, false);
    }
    return profile_with_events(which);
  }

  std::string profile_source() const override { return profile_source_; }

  std::vector<double> profile_with_events(const std::vector<int>& which) {
    std::vector<double> us(graph_.nodes.size(), 0.0);
    // Destroyed on every path, a failed launch or synchronisation included.
    struct Events {
      const CudaDriver* d;
      std::vector<std::pair<CUevent, CUevent>> pairs;
      ~Events() {
        for (auto& [a, b] : pairs) {
          if (a) d->cuEventDestroy(a);
          if (b) d->cuEventDestroy(b);
        }
      }
    } events{d_, std::vector<std::pair<CUevent, CUevent>>(which.size(), {nullptr, nullptr})};
    std::vector<std::pair<CUevent, CUevent>>& ev = events.pairs;
    for (auto& [a, b] : ev) {
      check(d_->cuEventCreate(&a, CU_EVENT_DEFAULT), "cuEventCreate", "profiling");
      check(d_->cuEventCreate(&b, CU_EVENT_DEFAULT), "cuEventCreate", "profiling");
    }
    hold(20000 + 15000 * static_cast<unsigned long long>(which.size()));
    for (size_t k = 0; k < which.size(); ++k) {
      check(d_->cuEventRecord(ev[k].first, stream_), "cuEventRecord", "profiling");
      launch(which[k], false);
      check(d_->cuEventRecord(ev[k].second, stream_), "cuEventRecord", "profiling");
    }
    check(d_->cuStreamSynchronize(stream_), "cuStreamSynchronize", "profiling");
    for (size_t k = 0; k < ev.size(); ++k) {
      float ms = 0;
      check(d_->cuEventElapsedTime(&ms, ev[k].first, ev[k].second), "cuEventElapsedTime",
            kernel_name(which[k]));
      us[which[k]] = ms * 1000.0;
    }
    return us;
  }

  std::vector<LayerTiming> run(Direction direction) override {
    ensure_usable();
    std::vector<LayerTiming> timings;
    std::vector<size_t> ran;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      const Group& grp = groups_[gi];
      if (grp.direction != direction) continue;
      // Host time covers only the calls that issue the layer, not the timing events around it.
      check(d_->cuEventRecord(events_[gi].first, stream_), "cuEventRecord", "timing");
      auto start = Clock::now();
      if (mode_ == LaunchMode::Graph) {
        check(d_->cuGraphLaunch(graphs_[gi].second, stream_), "cuGraphLaunch",
              "layer " + model_.layers[grp.layer].name);
      } else {
        // PDL against the kernel launched before, when that one is a single wave.
        int prev = -1;
        for (int i = grp.begin; i < grp.end; ++i) {
          if (geometry_[i].empty()) continue;
          launch(i, prev >= 0 && programmatic_edge(pdl_, pdl_facts_[prev], pdl_facts_[i]));
          prev = i;
        }
      }
      double host_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      check(d_->cuEventRecord(events_[gi].second, stream_), "cuEventRecord", "timing");
      timings.push_back({.layer = model_.layers[grp.layer].name,
                         .direction = direction_name(direction),
                         .kernels = grp.end - grp.begin,
                         .host_us = host_us,
                         .device_us = 0});
      ran.push_back(gi);
    }
    check(d_->cuStreamSynchronize(stream_), "cuStreamSynchronize",
          std::string(direction_name(direction)) + " step");
    for (size_t r = 0; r < ran.size(); ++r) {
      float ms = 0;
      check(d_->cuEventElapsedTime(&ms, events_[ran[r]].first, events_[ran[r]].second),
            "cuEventElapsedTime", "timing");
      timings[r].device_us = ms * 1000.0;
    }
    return timings;
  }

 private:
  // Spins one thread on the GPU for `ns` nanoseconds (capped at 50 ms).
  void hold(unsigned long long ns) {
    if (!hold_fn_) {
      static const char* kSource =
          "extern \"C\" __global__ void tilerun_hold(unsigned long long ns) {\n"
          "  unsigned long long t0, t;\n"
          "  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0));\n"
          "  do { asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); } while (t - t0 < "
          "ns);\n"
          "}\n";
      compiler::CubinResult bin = compiler::compile_cubin(
          "tilerun_hold", kSource, compiler::strict_nvrtc_options(), compiler::default_cache_dir());
      check(d_->cuModuleLoadData(&hold_module_, bin.cubin.data()), "cuModuleLoadData",
            "kernel tilerun_hold");
      modules_.push_back(hold_module_);
      check(d_->cuModuleGetFunction(&hold_fn_, hold_module_, "tilerun_hold"), "cuModuleGetFunction",
            "kernel tilerun_hold");
    }
    ns = std::min<unsigned long long>(ns, 50000000ull);
    void* params[] = {&ns};
    check(d_->cuLaunchKernel(hold_fn_, 1, 1, 1, 1, 1, 1, 0, stream_, params, nullptr),
          "cuLaunchKernel", "kernel tilerun_hold");
  }

  // A failed driver call leaves the device's state unknown (a step half issued, a sticky
  // context error): every later step, copy or profile is refused, naming the first failure.
  void check(CUresult r, const char* call, const std::string& what) const {
    if (r == CUDA_SUCCESS) return;
    try {
      cuda_check(r, call, what);
    } catch (const Error& e) {
      if (broken_.empty()) broken_ = e.message();
      throw;
    }
  }

  void ensure_usable() const {
    if (!broken_.empty()) throw Error("session is unusable after: " + broken_, ErrorKind::Runtime);
  }

  // One standalone launch, through cuLaunchKernelEx either way (with PDL: may start while its
  // predecessor in the stream finishes, waiting in griddepcontrol.wait before touching what that
  // one wrote). The kernel's name is built only on failure: this is the hot path of --mode launch.
  void launch(int i, bool pdl) {
    const compiler::LaunchGeometry& geo = geometry_[i];
    if (geo.empty()) return;
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = static_cast<unsigned>(geo.grid[0]);
    cfg.gridDimY = static_cast<unsigned>(geo.grid[1]);
    cfg.gridDimZ = static_cast<unsigned>(geo.grid[2]);
    cfg.blockDimX = static_cast<unsigned>(geo.threads);
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = dynamic_shared_[graph_.nodes[i].kernel];
    cfg.hStream = stream_;
    cfg.attrs = pdl ? &attr : nullptr;
    cfg.numAttrs = pdl ? 1 : 0;
    CUresult r = d_->cuLaunchKernelEx(&cfg, functions_[graph_.nodes[i].kernel],
                                      params_[i].kernel_params(), nullptr);
    if (r != CUDA_SUCCESS) check(r, "cuLaunchKernelEx", kernel_name(i));
  }

  std::string kernel_name(int i) const {
    return "kernel " + graph_.kernels[graph_.nodes[i].kernel]->sig.name;
  }

  // One layer's CUDA graph, appended to graphs_ as soon as it exists (so release() frees it if a
  // later call fails): a kernel node per launched node, the real dependencies as edges
  // (programmatic with PDL), and the layer's roots chained by launch-order edges.
  void build_graph(const Group& grp) {
    const std::string what = "layer " + model_.layers[grp.layer].name;
    graphs_.push_back({nullptr, nullptr});
    check(d_->cuGraphCreate(&graphs_.back().first, 0), "cuGraphCreate", what);
    CUgraph graph = graphs_.back().first;
    const int n = grp.end - grp.begin;
    std::vector<bool> launched(n);
    for (int j = 0; j < n; ++j) launched[j] = !geometry_[grp.begin + j].empty();
    const std::vector<std::vector<int>> deps = graph_edges(graph_, grp, launched);
    std::vector<CUgraphNode> nodes(n, nullptr);
    int last_root = -1;
    for (int j = 0; j < n; ++j) {
      if (!launched[j]) continue;
      const int i = grp.begin + j;
      const compiler::LaunchGeometry& geo = geometry_[i];
      CUDA_KERNEL_NODE_PARAMS p{};
      p.func = functions_[graph_.nodes[i].kernel];
      p.gridDimX = static_cast<unsigned>(geo.grid[0]);
      p.gridDimY = static_cast<unsigned>(geo.grid[1]);
      p.gridDimZ = static_cast<unsigned>(geo.grid[2]);
      p.blockDimX = static_cast<unsigned>(geo.threads);
      p.blockDimY = p.blockDimZ = 1;
      p.sharedMemBytes = dynamic_shared_[graph_.nodes[i].kernel];
      p.kernelParams = params_[i].kernel_params();
      check(d_->cuGraphAddKernelNode(&nodes[j], graph, nullptr, 0, &p), "cuGraphAddKernelNode",
            kernel_name(i));
      CUlaunchAttributeValue priority{};
      priority.priority = priorities_[i];
      check(d_->cuGraphKernelNodeSetAttribute(nodes[j], CU_LAUNCH_ATTRIBUTE_PRIORITY, &priority),
            "cuGraphKernelNodeSetAttribute", kernel_name(i));
      std::vector<CUgraphNode> from;
      std::vector<CUgraphEdgeData> edges;
      // With PDL the edges are programmatic: the dependent may launch once every block of its
      // producer has passed griddepcontrol.launch_dependents, and waits in griddepcontrol.wait.
      for (int d : deps[j]) {
        CUgraphEdgeData e{};
        if (programmatic_edge(pdl_, pdl_facts_[grp.begin + d], pdl_facts_[i])) {
          e.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
          e.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
        }
        from.push_back(nodes[d]);
        edges.push_back(e);
      }
      // A root after the first gets a launch-order edge from the root before it: it may start
      // once every block of that one has begun; no completion or memory dependency (invisible to
      // griddepcontrol.wait), so the roots still overlap. The graph then has one root: on the
      // H200 a second root costs 0.6-1 µs of host time in every cuGraphLaunch, while the launch
      // order changes nothing measurable on the device (bench/RESULTS.md).
      // Under an attached tool the roots stay unchained: a launch-order edge only orders the
      // roots' starts, and compute-sanitizer died (SIGSEGV) on graph mode with backward layers,
      // the graphs with several roots, and nowhere else (issue 12).
      if (deps[j].empty()) {
        if (last_root >= 0 && tool_.empty()) {
          CUgraphEdgeData e{};
          e.from_port = CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER;
          e.type = CU_GRAPH_DEPENDENCY_TYPE_DEFAULT;
          from.push_back(nodes[last_root]);
          edges.push_back(e);
        }
        last_root = j;
      }
      if (from.empty()) continue;
      std::vector<CUgraphNode> to(from.size(), nodes[j]);
      check(d_->cuGraphAddDependencies(graph, from.data(), to.data(), edges.data(), from.size()),
            "cuGraphAddDependencies", kernel_name(i));
    }
    // The nodes' own priorities, not the stream's.
    check(d_->cuGraphInstantiateWithFlags(&graphs_.back().second, graph,
                                          CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY),
          "cuGraphInstantiate", what);
    // Upload now rather than in the first cuGraphLaunch (9-30 µs of host time otherwise, which
    // the first step's timing would carry). Not under an attached tool: with compute-sanitizer
    // 13 on driver 580, the process died with SIGSEGV inside cuGraphUpload of the backward graphs
    // (backtrace taken on the H200, 2026-11-30); the first launch uploads instead.
    if (tool_.empty())
      check(d_->cuGraphUpload(graphs_.back().second, stream_), "cuGraphUpload", what);
  }

  const KernelGraph& graph_;
  const Model& model_;
  LaunchMode mode_;
  bool pdl_;
  bool cupti_;        // SessionOptions::profile: CUPTI may time the profiling pass
  std::string tool_;  // attached_cuda_tool(): "" when no tool is attached to the driver
  std::string profile_source_;
  mutable std::string broken_;       // the first failed driver call's message; "" while usable
  std::vector<PdlFacts> pdl_facts_;  // per node
  const CudaDriver* d_ = nullptr;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  CUdeviceptr arena_ = 0;
  std::vector<CUmodule> modules_;
  CUmodule hold_module_ = nullptr;
  CUfunction hold_fn_ = nullptr;
  std::vector<CUfunction> functions_;
  std::vector<unsigned> dynamic_shared_;  // per kernel: the launch's dynamic shared memory bytes
  std::vector<std::vector<compiler::TensorMapParam>>
      tensor_maps_;  // per kernel, in parameter order
  std::vector<compiler::LaunchGeometry> geometry_;
  std::vector<compiler::CudaParams> params_;
  std::vector<Group> groups_;
  std::vector<int> priorities_;  // per node, the graph node's stream priority
  std::vector<std::pair<CUevent, CUevent>> events_;
  std::vector<std::pair<CUgraph, CUgraphExec>> graphs_;
};

}  // namespace

std::unique_ptr<Executor> make_cuda_executor(const KernelGraph& graph, const Model& model,
                                             const SessionOptions& options, CompileStats& stats) {
  return std::make_unique<CudaExecutor>(graph, model, options, stats);
}

}  // namespace tilerun::graph
