// Writing a file so that nothing is lost when the write fails: a reader (or a crash, a full disk,
// a file-size limit) sees either the old file or the complete new one, never a torn one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tilerun::compiler {

// Writes `pieces`, in order, as the contents of `path`: into a temporary file in the same
// directory, flushed to disk and checked, then renamed over `path` (which keeps its permissions;
// a symbolic link is followed and its target replaced). A target that exists and is not a regular
// file (/dev/null, /dev/full, a pipe) is written directly, and every write is checked.
// Throws tilerun::Error (kind Runtime) "PATH: error: cannot open for writing: REASON" or
// "PATH: error: cannot write the file: REASON" on any failure; the temporary file is removed and
// an existing file at `path` is left as it was. (A process that wants a file-size limit reported
// this way, rather than killed by SIGXFSZ, ignores that signal, as the CLI does.)
// Pieces are views so that large buffers (tensor data) are written without a copy.
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces);
inline void write_file_atomically(const std::string& path, std::string_view contents) {
  write_file_atomically(path, std::vector<std::string_view>{contents});
}

}  // namespace tilerun::compiler
