#include "tilerun/error.h"


namespace tilerun {

std::string SourceLoc::str() const {
  if (!valid()) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(col);
}

namespace {
std::string full_message(const SourceLoc& loc, const std::string& message) {
  std::string prefix = loc.file.empty() && !loc.valid() ? "" : loc.str() + ": ";
  return prefix + "error: " + message;
}
}  // namespace

Error::Error(const std::string& message, ErrorKind kind)
    : std::runtime_error(full_message({}, message)), message_(message), kind_(kind) {}

Error::Error(SourceLoc loc, const std::string& message, ErrorKind kind)
    : std::runtime_error(full_message(loc, message)),
      loc_(std::move(loc)),
      message_(message),
      kind_(kind) {}

}  // namespace tilerun
