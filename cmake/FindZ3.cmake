# Find module for Z3. Debian's libz3-dev ships no CMake package config, so look for the
# header and library directly and expose the imported target z3::libz3.
find_path(Z3_INCLUDE_DIR NAMES z3++.h)
find_library(Z3_LIBRARY NAMES z3)
if(Z3_INCLUDE_DIR AND EXISTS "${Z3_INCLUDE_DIR}/z3_version.h")
  file(STRINGS "${Z3_INCLUDE_DIR}/z3_version.h" _line REGEX "#define Z3_FULL_VERSION")
  string(REGEX REPLACE ".*\"([0-9.]+)\".*" "\\1" Z3_VERSION "${_line}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Z3
  REQUIRED_VARS Z3_LIBRARY Z3_INCLUDE_DIR
  VERSION_VAR Z3_VERSION
  FAIL_MESSAGE "Z3 not found: install it with 'apt-get install libz3-dev' (or run scripts/setup.sh)")
if(Z3_FOUND AND NOT TARGET z3::libz3)
  add_library(z3::libz3 UNKNOWN IMPORTED)
  set_target_properties(z3::libz3 PROPERTIES
    IMPORTED_LOCATION "${Z3_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${Z3_INCLUDE_DIR}")
endif()
mark_as_advanced(Z3_INCLUDE_DIR Z3_LIBRARY)
