#include "breakpoint/x86/code_walk.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "breakpoint/x86/decoder.hpp"
#include "common/error.hpp"

namespace probecost {

namespace {

using Flow = Instruction::Flow;

std::optional<Instruction> decode_at(TraceeMemory& memory, RuntimeAddr at, RuntimeAddr hi) {
  std::uint8_t bytes[15];
  auto n = static_cast<std::size_t>(std::min<std::int64_t>(15, hi - at));
  try {
    memory.read(at, {bytes, n});
  } catch (const Error&) {
    // Fewer may be readable (code just before a hole): byte by byte, as far as they go.
    std::size_t got = 0;
    try {
      for (; got < n; ++got) bytes[got] = memory.read_byte(at + static_cast<std::int64_t>(got));
    } catch (const Error&) {
    }
    n = got;
  }
  if (n == 0) return std::nullopt;
  return decode({bytes, n}, at);
}

// The target a jmp or call through a RIP-relative slot reads from the slot.
std::optional<RuntimeAddr> slot_target(TraceeMemory& memory, const Instruction& in) {
  if (!in.rip_relative || in.disp_size != 4) return std::nullopt;
  std::int32_t disp;
  std::memcpy(&disp, in.bytes.data() + in.disp_offset, sizeof disp);
  std::uint64_t target = 0;
  try {
    memory.read(in.next() + disp, {reinterpret_cast<std::uint8_t*>(&target), sizeof target});
  } catch (const Error&) {
    return std::nullopt;
  }
  return RuntimeAddr(target);
}

// Where control may go after `in`.
std::vector<RuntimeAddr> successors(TraceeMemory& memory, const Instruction& in) {
  switch (in.flow) {
    case Flow::RelJump:
      return {in.target};
    case Flow::RelCondJump:
    case Flow::RelShortOnly:
    case Flow::RelCall:
      return {in.target, in.next()};
    case Flow::IndirectJump:
    case Flow::IndirectCall: {
      std::vector<RuntimeAddr> to;
      if (auto t = slot_target(memory, in)) to.push_back(*t);
      if (in.flow == Flow::IndirectCall) to.push_back(in.next());
      return to;
    }
    case Flow::Return:
    case Flow::FarBranch:
    case Flow::Transaction:
      return {};
    default:
      return {in.next()};
  }
}

}  // namespace

std::vector<RuntimeAddr> exits_from(TraceeMemory& memory, RuntimeAddr pc, RuntimeAddr lo,
                                    RuntimeAddr hi, std::size_t max_instructions) {
  std::set<std::uint64_t> exits, seen;
  std::vector<RuntimeAddr> todo{pc};
  while (!todo.empty() && seen.size() < max_instructions) {
    RuntimeAddr at = todo.back();
    todo.pop_back();
    if (at < lo || at >= hi) {
      exits.insert(at.value());
      continue;
    }
    if (!seen.insert(at.value()).second) continue;
    auto in = decode_at(memory, at, hi);
    if (!in) continue;  // not code we can read: that path ends
    for (auto next : successors(memory, *in)) todo.push_back(next);
  }
  std::vector<RuntimeAddr> out;
  for (auto e : exits) out.emplace_back(e);
  return out;
}

}  // namespace probecost
