#include "tracer/jump/branch_cache.hpp"

#include <cstring>
#include <fstream>
#include <iterator>

#include "common/cache.hpp"

namespace probecost {

namespace {

constexpr char kMagic[8] = {'P', 'C', 'B', 'R', 'I', 'X', '1', '\n'};

// FNV-1a over the pairs: a flipped bit or a torn write shows.
std::uint64_t checksum(const char* data, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i)
    h = (h ^ static_cast<unsigned char>(data[i])) * 1099511628211ull;
  return h;
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

std::string branch_cache_path(const std::string& build_id) {
  std::string dir = cache_dir();
  return dir.empty() || build_id.empty() ? "" : dir + "/branches/" + build_id;
}

// magic, code bytes, count, count (target, source) pairs, checksum of the pairs.
std::optional<BranchIndex> load_branches(const std::string& build_id, std::uint64_t code_bytes) {
  std::string path = branch_cache_path(build_id);
  if (path.empty()) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr std::size_t head = sizeof kMagic + 16, pair = 16;
  if (s.size() < head + 8 || std::memcmp(s.data(), kMagic, sizeof kMagic) != 0) return std::nullopt;
  std::uint64_t bytes = 0, count = 0, sum = 0;
  std::memcpy(&bytes, s.data() + 8, 8);
  std::memcpy(&count, s.data() + 16, 8);
  if (bytes != code_bytes || count > (s.size() - head - 8) / pair ||
      s.size() != head + count * pair + 8) {
    return std::nullopt;
  }
  std::memcpy(&sum, s.data() + head + count * pair, 8);
  if (sum != checksum(s.data() + head, count * pair)) return std::nullopt;
  std::vector<BranchIndex::Pair> pairs(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::memcpy(&pairs[i].first, s.data() + head + i * pair, 8);
    std::memcpy(&pairs[i].second, s.data() + head + i * pair + 8, 8);
  }
  return BranchIndex::of_sorted(std::move(pairs));
}

void store_branches(const std::string& build_id, std::uint64_t code_bytes,
                    const BranchIndex& index) {
  std::string path = branch_cache_path(build_id);
  if (path.empty()) return;
  const auto& pairs = index.pairs();
  std::string out(kMagic, sizeof kMagic);
  put(out, code_bytes);
  put(out, static_cast<std::uint64_t>(pairs.size()));
  std::size_t at = out.size();
  for (const auto& [target, source] : pairs) {
    put(out, target);
    put(out, source);
  }
  put(out, checksum(out.data() + at, out.size() - at));
  write_atomically(path, out);
}

}  // namespace probecost
