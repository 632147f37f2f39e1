// The IR's text form read back: the exact inverse of print() (ir_printer.h), so that
// print(parse(print(k))) == print(k) byte for byte and the parsed kernel equals k
// (ir_equal.h). Tests and tilerun-opt write IR by hand in this form.
//
// The text leaves types implicit; the parser recovers them as the IR defines them: a name's
// type from its binding (dims, loop and parallel variables i64, scalars and SIMT locals as
// declared, lets and reductions as their value), a load's from its buffer's dtype: the compute
// type in Tile IR and SIMT IR before lower_storage_types, the storage type after it.
// `-5` and `-1.5f` are literals (a negated literal prints `-(5)`), `i32(5)` the i32 constant (a
// cast of the i64 constant prints `i32((5))`), and `let x = v {...}` binds for its block only (a
// plain `let x = v` for the rest of the enclosing block).
//
// Every mistake is a tilerun::Error "FILE:LINE:COL: error: ..." at the offending token; the
// result is not verified (tile_verifier.h / simt_verifier.h do that).
#pragma once

#include <optional>
#include <string>

#include "compiler/ir/kernel.h"
#include "compiler/ir/simt_verifier.h"

namespace tilerun::compiler {

// `text` as print(const Kernel&) writes it ("tile_kernel NAME ...").
Kernel parse_tile_kernel(const std::string& text, const std::string& file);

// `text` as print(const SimtKernel&) writes it ("simt_kernel NAME ..."). `form` says whether
// loads move storage bits (form >= StorageTyped); without it the parser takes the storage
// reading when that one is well formed as StorageTyped IR (simt_problem) and the compute
// reading otherwise. The two readings differ only for bf16/f16/u8 loads and coincide in text
// only when such loads are used solely in int casts, so pass the form when it is known.
SimtKernel parse_simt_kernel(const std::string& text, const std::string& file,
                             std::optional<SimtForm> form = std::nullopt);

// Whether `text` (after leading blank space and `//` comment lines) starts a SIMT kernel.
bool is_simt_text(const std::string& text);

}  // namespace tilerun::compiler
