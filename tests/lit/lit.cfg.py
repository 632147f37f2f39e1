# lit configuration of the compiler's pass tests: each file holds input IR (Tile IR `.tir`, SIMT
# IR `.sir`) and RUN lines that pipe `tilerun-opt` into `FileCheck`. Run through ctest (`lit`),
# which passes the tool directories as parameters; see compiler/README.md.
import os

import lit.formats

config.name = "tilerun"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".tir", ".sir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = lit_config.params.get("exec_root", config.test_source_root)

# tilerun-opt from the build, FileCheck and `not` from LLVM's tools: found on PATH, first.
dirs = [lit_config.params.get("tilerun_opt_dir"), lit_config.params.get("llvm_tools_dir")]
missing = [name for name, d in zip(("tilerun_opt_dir", "llvm_tools_dir"), dirs) if not d]
if missing:
    lit_config.fatal("missing --param " + ", ".join(missing) + " (run the tests through ctest)")
config.environment["PATH"] = os.pathsep.join(dirs + [config.environment.get("PATH", "")])
