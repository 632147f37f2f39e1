// The op catalog: what a model may write in an `op:` entry.
#pragma once

#include <string>

namespace tilerun {

// Every registered op in name order, each with its inputs, outputs, attributes (kind, default),
// accepted dtypes and what it computes: the text `tilerun --list-ops` prints.
std::string op_catalog_text();

}  // namespace tilerun
