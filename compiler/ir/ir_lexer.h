// Tokens of the IR's text form (ir_printer.h), for ir_parser.h. Whitespace and newlines only
// separate tokens; `// ...` runs to the end of the line and is skipped.
#pragma once

#include <string>
#include <vector>

#include "tilerun/error.h"

namespace tilerun::compiler {

enum class TokKind {
  Ident,  // [A-Za-z_][A-Za-z0-9_.]*: names (blockIdx.x, sum.1) and keywords in context
  Int,    // -?[0-9]+
  Float,  // a number with an `f` suffix: 1f, -0.5f, 1e-05f
  Punct,  // ( ) [ ] { } , : = := +: <- and the operators + - * / % & | ^ << >> >>> == != < <=
          // > >= <u !
  End,
};

struct Token {
  TokKind kind;
  std::string text;  // for Float without the suffix
  int line = 0, col = 0;
};

// Splits `text` into tokens ending with one End token; a character that starts no token is a
// tilerun::Error at its position in `file`.
std::vector<Token> lex_ir(const std::string& text, const std::string& file);

}  // namespace tilerun::compiler
