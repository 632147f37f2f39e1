// tilerun's one exception type: a user-facing error with an optional source location.
#pragma once

#include <stdexcept>
#include <string>

namespace tilerun {

// Where in a user's file something was found (1-based line and column; line 0 = unknown).
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;

  bool valid() const { return line > 0; }
  // "file:line:col" (or just "file" when line is unknown).
  std::string str() const;
};

// What went wrong decides the CLI's exit code: a bad model or bad usage is 2, a failure while
// compiling or running is 1.
enum class ErrorKind { Usage = 2, Runtime = 1 };

// Thrown for every mistake a user can make and every failure they can see. what() is the full
// message, "file:line:col: error: ..." when a location is known.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, ErrorKind kind = ErrorKind::Usage);
  Error(SourceLoc loc, const std::string& message, ErrorKind kind = ErrorKind::Usage);

  const SourceLoc& loc() const { return loc_; }
  // The message without the location prefix.
  const std::string& message() const { return message_; }
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return static_cast<int>(kind_); }

 private:
  SourceLoc loc_;
  std::string message_;
  ErrorKind kind_;
};

}  // namespace tilerun
