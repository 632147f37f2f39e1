// graph_floor: what a CUDA graph of dependent tiny kernels costs on this GPU with no tilerun in
// the way, so that tilerun's chain200 figures can be read against the hardware's floor.
//
//   nvcc -O2 -std=c++17 -arch=sm_90a -o graph_floor bench/graph_floor.cu
//   ./graph_floor [NODES=200] [REPS=300]
//
// Part 1, device µs per kernel: one graph of NODES kernel nodes, each depending on the one before,
// launched REPS times (after 20 warm-up launches) with events around each launch and a
// synchronisation after it, as tilerun times a layer; the median / NODES is printed. Varied:
//   body   empty: no memory access; copy: y[i] = 0.5 * a[i] + b[i] over 1024 f32 (grid-stride),
//          reading the previous node's output (chain200's scale/add: a real load -> store
//          dependency)
//   grid   4x256 (tilerun's 1024-element kernels), 1x1024, 1x32
//   edges  full: plain graph edges; pdl: programmatic edges (CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
//          with the kernel issuing griddepcontrol.wait then .launch_dependents (wait-first) or
//          .launch_dependents then .wait (trigger-first)
// Part 2, host µs of cudaGraphLaunch (median over REPS launches of the same graph, 8 launches
// queued per synchronisation, like tilerun's 4 layer graphs per step) for graphs of empty 4x256
// kernels, uploaded after instantiation (cudaGraphUpload), with full and programmatic edges, and
// the first launch's µs: chains of 5 and 8 nodes; 8 nodes with two roots, two leaves, one fork
// and join; tiny.yaml's backward layer ({a, b} -> c -> {d, e} -> f -> {g, h}), the same with b
// after a, with a launch-order edge a -> b (b may start once a's blocks have all begun: one
// root, the two still overlap), with launch-order edges a -> b, d -> e, g -> h; a chain of 200;
// 4 chains of 49 joined pairwise (4 roots), and the same with the roots in launch order.
// Launch-order edges are tried with the default and the programmatic edge type.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

enum Order { kNone = 0, kWaitFirst = 1, kTriggerFirst = 2 };

template <int order>
__device__ __forceinline__ void prologue() {
  if (order == kWaitFirst) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  } else if (order == kTriggerFirst) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
}

template <int order>
__global__ void empty_kernel(float*, const float*, const float*, int) {
  prologue<order>();
}

template <int order>
__global__ void copy_kernel(float* y, const float* a, const float* b, int n) {
  prologue<order>();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = __fadd_rn(__fmul_rn(0.5f, a[i]), b[i]);
}

using KernelFn = void (*)(float*, const float*, const float*, int);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Shape {
  const char* name;
  int nodes;
  std::vector<std::vector<int>> deps;  // per node, earlier nodes it depends on
  // Launch-order edges (from, to): `to` may launch once every block of `from` has begun; no
  // completion or memory dependency.
  std::vector<std::pair<int, int>> lo = {};
};

// The edge type of launch-order edges: default, or programmatic (then the downstream's
// griddepcontrol.wait also waits for the upstream's completion).
cudaGraphDependencyType g_lo_type = cudaGraphDependencyTypeDefault;

// Builds and instantiates a graph of `fn` nodes over buffers bufs[0..2] (node j reads
// bufs[j % 2] and x, writes bufs[(j + 1) % 2]).
cudaGraphExec_t build(const Shape& s, KernelFn fn, dim3 grid, dim3 block, bool pdl, float** bufs,
                      const float* x, int n, bool upload, cudaStream_t stream) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  std::vector<cudaGraphNode_t> nodes(s.nodes);
  std::vector<std::vector<void*>> args(s.nodes);
  std::vector<const float*> in(s.nodes);
  std::vector<float*> out(s.nodes);
  for (int j = 0; j < s.nodes; ++j) {
    out[j] = bufs[(j + 1) % 2];
    in[j] = bufs[j % 2];
    args[j] = {&out[j], &in[j], const_cast<const float**>(&x), &n};
    cudaKernelNodeParams p{};
    p.func = reinterpret_cast<void*>(fn);
    p.gridDim = grid;
    p.blockDim = block;
    p.kernelParams = args[j].data();
    CK(cudaGraphAddKernelNode(&nodes[j], g, nullptr, 0, &p));
    std::vector<cudaGraphNode_t> after;
    std::vector<cudaGraphEdgeData> e;
    for (int d : s.deps[j]) {
      after.push_back(nodes[d]);
      e.push_back(cudaGraphEdgeData{});
      if (pdl) {
        e.back().from_port = cudaGraphKernelNodePortProgrammatic;
        e.back().type = cudaGraphDependencyTypeProgrammatic;
      }
    }
    for (auto [from, to] : s.lo)
      if (to == j) {
        after.push_back(nodes[from]);
        e.push_back(cudaGraphEdgeData{});
        e.back().from_port = cudaGraphKernelNodePortLaunchCompletion;
        e.back().type = g_lo_type;
      }
    if (after.empty()) continue;
    std::vector<cudaGraphNode_t> to(after.size(), nodes[j]);
    cudaError_t err = cudaGraphAddDependencies(g, after.data(), to.data(), e.data(), after.size());
    if (err != cudaSuccess) {  // an edge kind this driver refuses: say so, measure the rest
      std::printf("%s: cudaGraphAddDependencies: %s\n", s.name, cudaGetErrorString(err));
      CK(cudaGraphDestroy(g));
      return nullptr;
    }
  }
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  if (upload) CK(cudaGraphUpload(exec, stream));
  CK(cudaStreamSynchronize(stream));
  CK(cudaGraphDestroy(g));
  return exec;
}

Shape chain(int n) {
  Shape s{"chain", n, std::vector<std::vector<int>>(n)};
  for (int j = 1; j < n; ++j) s.deps[j] = {j - 1};
  return s;
}

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 200;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 300;
  const int n = 1024;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  CK(cudaDriverGetVersion(&driver));
  CK(cudaRuntimeGetVersion(&runtime));
  std::printf("graph_floor on %s (%d SMs), driver %d, runtime %d; %d nodes, %d reps\n", prop.name,
              prop.multiProcessorCount, driver, runtime, nodes, reps);
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float *bufs[2], *x;
  for (float*& b : bufs) {
    CK(cudaMalloc(&b, n * sizeof(float)));
    CK(cudaMemset(b, 0, n * sizeof(float)));
  }
  CK(cudaMalloc(&x, n * sizeof(float)));
  CK(cudaMemset(x, 0, n * sizeof(float)));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  // ---- Part 1: device µs per kernel of a chain.
  struct Body {
    const char* name;
    KernelFn fn[3];
  } bodies[] = {
      {"empty", {empty_kernel<kNone>, empty_kernel<kWaitFirst>, empty_kernel<kTriggerFirst>}},
      {"copy", {copy_kernel<kNone>, copy_kernel<kWaitFirst>, copy_kernel<kTriggerFirst>}},
  };
  struct Geo {
    const char* name;
    dim3 grid, block;
  } geos[] = {
      {"4x256", dim3(4), dim3(256)}, {"1x1024", dim3(1), dim3(1024)}, {"1x32", dim3(1), dim3(32)}};
  struct Edge {
    const char* name;
    bool pdl;
    int order;
  } edges[] = {{"full", false, kNone},
               {"full+griddep", false, kWaitFirst},
               {"pdl wait-first", true, kWaitFirst},
               {"pdl trigger-first", true, kTriggerFirst}};
  std::printf("\ndevice us per kernel, chain of %d (median of %d launches)\n", nodes, reps);
  std::printf("%-6s %-7s %-18s %10s %10s\n", "body", "grid", "edges", "dev us/k", "host us");
  const Shape ch = chain(nodes);
  for (const Body& b : bodies)
    for (const Geo& geo : geos)
      for (const Edge& e : edges) {
        cudaGraphExec_t exec =
            build(ch, b.fn[e.order], geo.grid, geo.block, e.pdl, bufs, x, n, true, stream);
        std::vector<double> dev, host;
        for (int r = 0; r < reps + 20; ++r) {
          CK(cudaEventRecord(e0, stream));
          auto t0 = std::chrono::steady_clock::now();
          CK(cudaGraphLaunch(exec, stream));
          auto t1 = std::chrono::steady_clock::now();
          CK(cudaEventRecord(e1, stream));
          CK(cudaStreamSynchronize(stream));
          float ms = 0;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          if (r >= 20) {
            dev.push_back(ms * 1000.0);
            host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
          }
        }
        std::printf("%-6s %-7s %-18s %10.3f %10.2f\n", b.name, geo.name, e.name,
                    median(dev) / nodes, median(host));
        CK(cudaGraphExecDestroy(exec));
      }

  // ---- Part 2: host µs of one cudaGraphLaunch of a small graph.
  // tiny.yaml's backward layer: {a, b} -> c -> {d, e} -> f -> {g, h}.
  const std::vector<std::vector<int>> tb = {{}, {}, {0, 1}, {2}, {2}, {3, 4}, {5}, {5}};
  // dag200: 4 chains of 49 from the roots, joined pairwise, then once more.
  Shape dag{"dag200", 199, std::vector<std::vector<int>>(199)};
  for (int b = 0; b < 4; ++b)
    for (int k = 1; k < 49; ++k) dag.deps[b * 49 + k] = {b * 49 + k - 1};
  dag.deps[196] = {48, 97};
  dag.deps[197] = {146, 195};
  dag.deps[198] = {196, 197};
  Shape dag_lo = dag;
  dag_lo.name = "dag200-lo";
  dag_lo.lo = {{0, 49}, {49, 98}, {98, 147}};
  std::vector<Shape> shapes = {chain(5),
                               chain(8),
                               {"roots2", 8, {{}, {}, {0, 1}, {2}, {3}, {4}, {5}, {6}}},
                               {"leaves2", 8, {{}, {0}, {1}, {2}, {3}, {4}, {5}, {5}}},
                               {"diamond", 8, {{}, {0}, {1}, {1}, {2, 3}, {4}, {5}, {6}}},
                               {"tiny-bwd", 8, tb},
                               {"tb-1root", 8, {{}, {0}, {0, 1}, {2}, {2}, {3, 4}, {5}, {5}}},
                               {"tb-root-lo", 8, tb, {{0, 1}}},
                               {"tb-lo-chain", 8, tb, {{0, 1}, {3, 4}, {6, 7}}},
                               chain(200),
                               dag,
                               dag_lo};
  shapes[0].name = "chain5";
  shapes[1].name = "chain8";
  shapes[9].name = "chain200";
  std::printf("\nhost us per cudaGraphLaunch (median of %d; 8 launches per sync), empty 4x256\n",
              reps);
  std::printf("%-12s %-5s %-7s %10s %10s\n", "shape", "edges", "lo type", "host us", "first us");
  for (const Shape& s : shapes)
    for (bool pdl : {false, true})
      for (cudaGraphDependencyType lo :
           {cudaGraphDependencyTypeDefault, cudaGraphDependencyTypeProgrammatic}) {
        if (s.lo.empty() && lo != cudaGraphDependencyTypeDefault) continue;
        g_lo_type = lo;
        KernelFn fn = pdl ? empty_kernel<kTriggerFirst> : empty_kernel<kNone>;
        cudaGraphExec_t exec = build(s, fn, dim3(4), dim3(256), pdl, bufs, x, n, true, stream);
        if (!exec) continue;
        std::vector<double> host;
        double first = 0;
        for (int r = 0; r < reps; ++r) {
          auto t0 = std::chrono::steady_clock::now();
          CK(cudaGraphLaunch(exec, stream));
          auto t1 = std::chrono::steady_clock::now();
          double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
          if (r == 0)
            first = us;
          else
            host.push_back(us);
          if (r % 8 == 7) CK(cudaStreamSynchronize(stream));
        }
        CK(cudaStreamSynchronize(stream));
        std::printf("%-12s %-5s %-7s %10.2f %10.2f\n", s.name, pdl ? "pdl" : "full",
                    s.lo.empty()                           ? "-"
                    : lo == cudaGraphDependencyTypeDefault ? "default"
                                                           : "prog",
                    median(host), first);
        CK(cudaGraphExecDestroy(exec));
      }
  return 0;
}
