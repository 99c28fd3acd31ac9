#pragma once
// The call buffer, jump area and patches of test_jump_calls.cpp: the test process patches its
// own functions (call_shapes.S) and drains the records its calls write.
#include <gtest/gtest.h>
#include <x86intrin.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "self_patch.hpp"

namespace probecost::selftest {

inline std::uint64_t thread_pointer() {
  std::uint64_t tp;
  asm("mov %%fs:0, %0" : "=r"(tp));
  return tp;
}

struct Calls {
  LocalCallBuffer buffer;
  LocalArea area;
  std::vector<std::unique_ptr<CallPatch>> patches;
  std::vector<jump::CallRecord> records;

  explicit Calls(const jump::CallBufferConfig& config)
      : buffer(config), area(address_of("shape_leaf"), jump::AreaConfig{}) {}
  void patch(const std::string& name, std::uint32_t id) {
    patches.push_back(patch_calls(name, id, area, buffer));
    patches.back()->install();
  }
  void unpatch() {
    for (auto& p : patches) p->remove();
  }
  // Everything written so far, in TSC order.
  std::vector<jump::CallRecord>& drain(jump::CallReader& reader) {
    reader.poll(__rdtsc(), true);
    reader.take(records);
    return records;
  }
};

inline jump::CallBufferConfig config(int args, std::uint64_t capacity = 1 << 20) {
  jump::CallBufferConfig c;
  c.cpus = static_cast<std::uint32_t>(std::thread::hardware_concurrency() * 2);
  c.capacity = capacity;
  c.subbuffers = capacity >= 16 * 4096 ? 16 : 2;
  c.args = args;
  c.max_ids = 8;
  return c;
}

inline jump::CallReader reader_of(Calls& c) {
  return jump::CallReader(c.buffer.view(), c.buffer.layout(), __rdtsc(), {});
}

#define NEED_RSEQ() \
  if (!have_rseq()) GTEST_SKIP() << "glibc registered no rseq in this process"

}  // namespace probecost::selftest
