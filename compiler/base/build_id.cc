#include "compiler/base/build_id.h"

#include <elf.h>
#include <link.h>

#include <cstdint>
#include <cstring>

namespace tilerun::compiler {

namespace {

struct Search {
  uintptr_t address = 0;  // an address inside the module wanted
  std::string id;
};

// Notes are 4-byte aligned in both ELF classes.
size_t align4(size_t n) { return (n + 3) & ~size_t{3}; }

// The build id note of the module that holds `address`, from its PT_NOTE segments.
int visit(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum && !holds; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    holds =
        ph.p_type == PT_LOAD && search->address >= start && search->address < start + ph.p_memsz;
  }
  if (!holds) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
    const unsigned char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) note;
      std::memcpy(&note, p, sizeof note);
      const unsigned char* name = p + sizeof note;
      const unsigned char* desc = name + align4(note.n_namesz);
      if (desc + note.n_descsz > end) break;
      if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 &&
          std::memcmp(name, "GNU", 4) == 0) {
        static const char kHex[] = "0123456789abcdef";
        for (uint32_t b = 0; b < note.n_descsz; ++b) {
          search->id += kHex[desc[b] >> 4];
          search->id += kHex[desc[b] & 15];
        }
        return 1;
      }
      p = desc + align4(note.n_descsz);
    }
  }
  return 1;  // the module, without a build id
}

}  // namespace

const std::string& library_build_id() {
  static const std::string id = [] {
    Search search{.address = reinterpret_cast<uintptr_t>(&visit), .id = {}};
    dl_iterate_phdr(visit, &search);
    return search.id;
  }();
  return id;
}

}  // namespace tilerun::compiler
