#include "compiler/codegen/cpu_backend.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <chrono>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#include <mutex>

#include "compiler/analysis/launch_geometry.h"
#include "compiler/base/check.h"
#include "compiler/base/disk_cache.h"
#include "compiler/base/sha256.h"
#include "compiler/codegen/cpu_codegen.h"
#include "compiler/codegen/fault_injection.h"
#include "compiler/codegen/mma_model.h"
#include "compiler/codegen/tma_model.h"
#include "compiler/lower.h"
#include "tilerun/error.h"

namespace tilerun::compiler {

class CpuKernelImpl {
 public:
  KernelSignature sig;
  std::string llvm_ir;
  double compile_ms = 0;
  bool from_cache = false;
  std::unique_ptr<llvm::orc::LLJIT> jit;  // owns the code `entry` points into
  CpuEntry entry = nullptr;
};

namespace {

void initialize_llvm_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

template <class T>
T unwrap(llvm::Expected<T> v, const std::string& what) {
  if (!v) TR_CHECK(false, what + ": " + llvm::toString(v.takeError()));
  return std::move(*v);
}

void check(llvm::Error err, const std::string& what) {
  if (err) TR_CHECK(false, what + ": " + llvm::toString(std::move(err)));
}

std::string module_text(const llvm::Module& m) {
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os, nullptr);
  return os.str();
}

// Strict floating point: no fused multiply-add unless the IR asked for llvm.fma; the IR
// carries no fast-math flags, so no other value-changing transformation is allowed either.
llvm::orc::JITTargetMachineBuilder strict_host_target() {
  auto jtmb = unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host");
  jtmb.getOptions().AllowFPOpFusion = llvm::FPOpFusion::Strict;
  jtmb.getOptions().UnsafeFPMath = false;
  jtmb.getOptions().NoInfsFPMath = false;
  jtmb.getOptions().NoNaNsFPMath = false;
  jtmb.setCodeGenOptLevel(llvm::CodeGenOpt::Default);
  return jtmb;
}

// Strict numerics need IEEE defaults while a kernel runs — round to nearest even, subnormals
// neither flushed (FTZ) nor read as zero (DAZ) — whatever the host process has set.
class IeeeFloatEnvironment {
 public:
#if defined(__x86_64__)
  IeeeFloatEnvironment() : saved_(_mm_getcsr()) {
    constexpr unsigned kFtz = 1u << 15, kDaz = 1u << 6, kRoundingMode = 3u << 13;
    _mm_setcsr(saved_ & ~(kFtz | kDaz | kRoundingMode));
  }
  ~IeeeFloatEnvironment() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(m, mam);
}

// Object code is cached on disk under the SHA-256 of everything that decides it: the LLVM
// version, the host target (triple, CPU, features), the options above and the unoptimised IR.
// The "O2 strict-fp" tag stands for strict_host_target() and optimize(): change it with them.
DiskCache object_cache() {
  return DiskCache(default_cache_dir(), "cpu-object-v1", "tilerun-object 1", "object code");
}

std::string object_key(const llvm::orc::JITTargetMachineBuilder& jtmb, const std::string& ir) {
  return sha256_hex("llvm " LLVM_VERSION_STRING "\n" + jtmb.getTargetTriple().str() + "\n" +
                    jtmb.getCPU() + "\n" + jtmb.getFeatures().getString() + "\nO2 strict-fp\n" +
                    ir);
}

// The module optimised and compiled to a relocatable object, as the JIT would compile it.
std::string compile_object(llvm::Module& m, llvm::TargetMachine& tm, const std::string& name) {
  optimize(m, tm);
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  TR_CHECK(!tm.addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_ObjectFile),
           "the host target cannot emit object code for '" + name + "'");
  pm.run(m);
  return std::string(buffer.data(), buffer.size());
}

}  // namespace

CpuKernel::CpuKernel(std::unique_ptr<CpuKernelImpl> impl) : impl_(std::move(impl)) {}
CpuKernel::~CpuKernel() = default;
double CpuKernel::compile_ms() const { return impl_->compile_ms; }
bool CpuKernel::from_cache() const { return impl_->from_cache; }
const KernelSignature& CpuKernel::signature() const { return impl_->sig; }
const std::string& CpuKernel::llvm_ir() const { return impl_->llvm_ir; }

std::string emit_llvm_ir(const SimtKernel& kernel) {
  return module_text(*codegen_cpu(kernel).module);
}

std::unique_ptr<CpuKernel> compile_cpu(const Kernel& kernel) { return compile_cpu(lower(kernel)); }

std::unique_ptr<CpuKernel> compile_cpu(const SimtKernel& kernel) {
  initialize_llvm_once();
  auto start = std::chrono::steady_clock::now();
  auto impl = std::make_unique<CpuKernelImpl>();
  impl->sig = kernel.sig;

  CpuModule mod = codegen_cpu(kernel);
  impl->llvm_ir = module_text(*mod.module);

  llvm::orc::JITTargetMachineBuilder jtmb = strict_host_target();
  std::unique_ptr<llvm::TargetMachine> tm =
      unwrap(jtmb.createTargetMachine(), "creating the target machine");
  mod.module->setDataLayout(tm->createDataLayout());
  mod.module->setTargetTriple(tm->getTargetTriple().str());
  const DiskCache cache = object_cache();
  const std::string digest = cache.enabled() ? object_key(jtmb, impl->llvm_ir) : "";
  std::string object;
  if (std::optional<std::string> hit = cache.load(digest, kernel.sig.name)) {
    object = std::move(*hit);
    impl->from_cache = true;
  } else {
    object = compile_object(*mod.module, *tm, kernel.sig.name);
    cache.store(digest, object);
  }

  impl->jit = unwrap(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create(),
                     "creating the JIT");
  // The optimiser may turn loops into memset/memcpy calls: resolve them from the process.
  impl->jit->getMainJITDylib().addGenerator(
      unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                 impl->jit->getDataLayout().getGlobalPrefix()),
             "looking up process symbols"));
  // The tensor core's model for gemm statements, by address (not through the process's symbol
  // table, which a static or hidden-visibility build of the library may not export).
  llvm::orc::SymbolMap model;
  model[impl->jit->mangleAndIntern("tilerun_cpu_gemm")] = llvm::JITEvaluatedSymbol(
      llvm::pointerToJITTargetAddress(&tilerun_cpu_gemm), llvm::JITSymbolFlags::Exported);
  model[impl->jit->mangleAndIntern("tilerun_cpu_tma_copy")] = llvm::JITEvaluatedSymbol(
      llvm::pointerToJITTargetAddress(&tilerun_cpu_tma_copy), llvm::JITSymbolFlags::Exported);
  check(impl->jit->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(model))),
        "defining the tensor core model for '" + kernel.sig.name + "'");
  check(impl->jit->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(object, kernel.sig.name)),
        "adding '" + kernel.sig.name + "' to the JIT");
  // A test-injected failure (TILERUN_FAULT=LLJIT::lookup:N) stands for the machine-code step
  // failing: a clear error naming the kernel, with the JIT released by `impl`.
  if (inject_fault("LLJIT::lookup"))
    throw Error("LLVM failed to compile kernel " + kernel.sig.name +
                    ": LLJIT::lookup: injected fault (TILERUN_FAULT)",
                ErrorKind::Runtime);
  auto addr = unwrap(impl->jit->lookup(kCpuEntryName), "linking '" + kernel.sig.name + "'");
  impl->entry = addr.toPtr<CpuEntry>();

  impl->compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return std::make_unique<CpuKernel>(std::move(impl));
}

void CpuKernel::launch(const KernelArgs& args) const {
  const KernelSignature& sig = impl_->sig;
  // The same checks and grid as a GPU launch, so both backends accept exactly the same calls.
  check_launch_args(sig, args);
  LaunchGeometry geometry = launch_geometry(sig, args.dims);
  if (geometry.empty()) return;

  IeeeFloatEnvironment ieee;
  impl_->entry(const_cast<void**>(args.buffers.data()), args.dims.data(), args.scalars.data(),
               geometry.grid.data(), 0, geometry.blocks());
}

}  // namespace tilerun::compiler
