#include "breakpoint/jump/patch_site.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "breakpoint/int3/site.hpp"
#include "common/error.hpp"

namespace probecost {

namespace {

std::string hex_bytes(std::span<const std::uint8_t> bytes) {
  std::string out;
  char buf[4];
  for (auto b : bytes) {
    std::snprintf(buf, sizeof buf, "%02x ", b);
    out += buf;
  }
  if (!out.empty()) out.pop_back();
  return out;
}

// Every copy of a patch's bytes is sized by its length: one beyond kJumpLength ..
// kMaxPatchLength would read or write past the arrays (a negative fill, a 200-byte read).
void check_length(const JumpPatch& patch) {
  if (patch.length < kJumpLength || patch.length > kMaxPatchLength) {
    throw Error("internal error: the jump patch at " + patch.site.hex() + " has " +
                std::to_string(patch.length) + " bytes; a jump takes " +
                std::to_string(kJumpLength) + " to " + std::to_string(kMaxPatchLength));
  }
}

}  // namespace

JumpPatch JumpPatch::make(const JumpPlan& plan, RuntimeAddr trampoline) {
  if (std::string why = why_malformed(plan); !why.empty()) {
    throw Error("internal error: the jump plan at " + plan.site.hex() +
                " cannot become a patch: " + why);
  }
  JumpPatch p;
  p.site = plan.site;
  p.length = plan.length;
  p.original = plan.original;
  p.trampoline = trampoline;
  std::int64_t rel = trampoline - (plan.site + static_cast<std::int64_t>(kJumpLength));
  if (rel < INT32_MIN || rel > INT32_MAX) {
    throw Error("trampoline " + trampoline.hex() + " is beyond a jump's reach of " +
                plan.site.hex());
  }
  auto rel32 = static_cast<std::int32_t>(rel);
  p.patch[0] = kJmpRel32;
  std::memcpy(&p.patch[1], &rel32, 4);
  // The padding after the jump is int3, as optprobes pads: no thread should ever execute it, and
  // if one does (it was between two displaced instructions when the patch went in, and nobody
  // moved it), it traps where everyone can see it instead of sliding over nops past the
  // instructions it skipped.
  std::fill(p.patch.begin() + kJumpLength, p.patch.begin() + p.length, kInt3);
  return p;
}

PatchState patch_state(const JumpPatch& patch, std::span<const std::uint8_t> now) {
  auto orig = patch.original_bytes(), ours = patch.patch_bytes();
  if (now.size() != patch.length) return PatchState::Foreign;
  if (std::equal(now.begin(), now.end(), orig.begin())) return PatchState::Original;
  if (std::equal(now.begin(), now.end(), ours.begin())) return PatchState::Patched;
  if (now[0] != orig[0] && now[0] != ours[0] && now[0] != kInt3) return PatchState::Foreign;
  for (std::size_t i = 1; i < now.size(); ++i) {
    if (now[i] != orig[i] && now[i] != ours[i]) return PatchState::Foreign;
  }
  return PatchState::Transition;
}

void PatchSite::write_in_order(std::span<const std::uint8_t> bytes, CodeSync* sync, bool evacuate) {
  // 1. int3 over byte 0: from now on no thread gets past byte 0 without trapping.
  memory_->write_byte(patch_.site, kInt3);
  if (sync) sync->serialize();
  if (sync && evacuate) sync->evacuate(patch_.site, patch_.length);
  // 2. Bytes 1..n-1, behind the int3: no CPU decodes them as part of an instruction now.
  memory_->write(patch_.site + 1, bytes.subspan(1));
  if (sync) sync->serialize();
  // 3. Byte 0 last: the new instruction appears whole.
  memory_->write_byte(patch_.site, bytes[0]);
  if (sync) sync->serialize();
}

void PatchSite::expect(std::span<const std::uint8_t> bytes, const char* what) {
  std::array<std::uint8_t, kMaxPatchLength> now{};
  memory_->read(patch_.site, {now.data(), patch_.length});
  if (!std::equal(bytes.begin(), bytes.end(), now.begin())) {
    throw Error(std::string(what) + " at " + patch_.site.hex() + ": expected " + hex_bytes(bytes) +
                ", found " + hex_bytes({now.data(), patch_.length}));
  }
}

void PatchSite::install(CodeSync* sync) {
  if (installed_) return;
  // Refuse code that changed since it was planned: another tool's int3, a patch already there.
  expect(patch_.original_bytes(), "the site no longer holds the bytes it was planned from");
  write_in_order(patch_.patch_bytes(), sync, true);
  installed_ = true;
  // Read back (as LLDB does for an int3): a write that went nowhere would count nothing.
  expect(patch_.patch_bytes(), "the jump did not stick");
}

void PatchSite::remove(CodeSync* sync) {
  if (!installed_) return;
  // No thread can be inside the patched bytes: the jump is one instruction, the padding is
  // never run. So nobody needs to move; threads in the trampoline finish there.
  write_in_order(patch_.original_bytes(), sync, false);
  installed_ = false;
  expect(patch_.original_bytes(), "the original bytes did not stick");
}

PatchSite::PatchSite(TraceeMemory& memory, const JumpPatch& patch, std::string label)
    : memory_(&memory), patch_(patch), label_(std::move(label)) {
  check_length(patch_);
}

PatchState restore(TraceeMemory& memory, const JumpPatch& patch, CodeSync* sync) {
  check_length(patch);
  std::array<std::uint8_t, kMaxPatchLength> now{};
  memory.read(patch.site, {now.data(), patch.length});
  PatchState found = patch_state(patch, {now.data(), patch.length});
  if (found == PatchState::Patched || found == PatchState::Transition) {
    PatchSite site(memory, patch);
    site.adopt();
    site.remove(sync);
  }
  return found;
}

}  // namespace probecost
