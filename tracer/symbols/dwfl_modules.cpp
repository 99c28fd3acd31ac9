#include "tracer/symbols/dwfl_modules.hpp"

#include <algorithm>
#include <tuple>

namespace probecost {

std::string module_path(Dwfl_Module* mod) {
  const char* path = nullptr;
  const char* name =
      dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, &path, nullptr);
  return path ? path : name ? name : "?";
}

std::string base_name(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

bool is_function(const GElf_Sym& sym) {
  int type = GELF_ST_TYPE(sym.st_info);
  return (type == STT_FUNC || type == STT_GNU_IFUNC) && sym.st_shndx != SHN_UNDEF;
}

std::string without_version(const std::string& name) {
  return name.substr(0, name.find('@'));
}

bool compat_version(const std::string& name) {
  auto at = name.find('@');
  return at != std::string::npos && name.compare(at, 2, "@@") != 0;
}

void dedupe(std::vector<Symbol>& v, bool by_address) {
  std::stable_sort(v.begin(), v.end(), [](const Symbol& a, const Symbol& b) {
    return std::tuple(a.module, a.address, compat_version(a.name)) <
           std::tuple(b.module, b.address, compat_version(b.name));
  });
  for (std::size_t i = 0; by_address && i < v.size();) {
    std::size_t end = i;
    bool ifunc = false;
    for (; end < v.size() && v[end].module == v[i].module && v[end].address == v[i].address;
         ++end) {
      ifunc = ifunc || v[end].ifunc;
    }
    for (; i < end; ++i) v[i].ifunc = ifunc;
  }
  v.erase(std::unique(v.begin(), v.end(),
                      [by_address](const Symbol& a, const Symbol& b) {
                        return a.module == b.module && a.address == b.address &&
                               (by_address || a.name == b.name);
                      }),
          v.end());
}

}  // namespace probecost
