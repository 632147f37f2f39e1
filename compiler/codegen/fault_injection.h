// Test-only fault injection: makes the N-th call of a named external call (a CUDA driver entry
// point, NVRTC or LLVM compilation) fail, so tests can show that each failure gives a clear
// tilerun::Error, leaks nothing and leaves a session usable or plainly refused. Disarmed (one
// relaxed atomic load per call site) unless TILERUN_FAULT or set_faults() arms it.
#pragma once

#include <string>

namespace tilerun::compiler {

// Arms faults from a spec "CALL:N[,CALL:N...]": the N-th call (1-based, counted from arming) of
// CALL fails, e.g. "cuModuleLoadData:1,nvrtcCompileProgram:3". An empty spec disarms. Replaces
// the previous spec and resets every count. Throws tilerun::Error (kind Usage) on a bad spec.
// The environment variable TILERUN_FAULT, read once at the first call, is the same spec.
void set_faults(const std::string& spec);

// True when this call of `call` must fail (counts the call). Thread-safe.
bool inject_fault(const char* call);

// How many faults have been injected since arming.
int injected_faults();

}  // namespace tilerun::compiler
