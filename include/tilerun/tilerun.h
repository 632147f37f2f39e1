// tilerun: a static-graph executor for fine-grained model layers. This header is the whole
// public surface: load and check a model, read and write tensors.
#pragma once

#include "tilerun/dtype.h"
#include "tilerun/error.h"
#include "tilerun/model.h"
#include "tilerun/ops.h"
#include "tilerun/run_options.h"
#include "tilerun/session.h"
#include "tilerun/tensor.h"

namespace tilerun {

// The library's version, "MAJOR.MINOR.PATCH".
const char* version();

}  // namespace tilerun
