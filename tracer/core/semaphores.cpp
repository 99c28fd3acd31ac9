#include "tracer/core/semaphores.hpp"

#include <cstring>

#include "tracer/core/process.hpp"
#include "tracer/int3/trap_records.hpp"

namespace probecost {

std::uint16_t Semaphores::value(TraceeMemory& memory, RuntimeAddr at) {
  std::uint8_t bytes[2];
  memory.read(at, bytes);
  std::uint16_t v;
  std::memcpy(&v, bytes, sizeof v);
  return v;
}

namespace {

void add(TraceeMemory& memory, RuntimeAddr at, int delta) {
  std::uint16_t v = Semaphores::value(memory, at);
  // Never below zero: a program (or another tracer) that zeroed it keeps its zero.
  if (delta < 0 && v == 0) return;
  v = static_cast<std::uint16_t>(v + delta);
  std::uint8_t bytes[2];
  std::memcpy(bytes, &v, sizeof v);
  memory.write(at, bytes);
}

}  // namespace

void Semaphores::raise(TraceeMemory& memory, RuntimeAddr at, const trap::FileIdentity& file,
                       Guardian* guardian, RuntimeAddr witness) {
  Held& h = held_[at];
  if (h.probes++) return;
  h.file = file;
  h.witness = witness;
  try {
    add(memory, at, +1);
  } catch (...) {
    held_.erase(at);
    throw;
  }
  if (guardian) guardian->watch_semaphore(at, file);
}

void Semaphores::forget(RuntimeAddr at, Guardian* guardian) {
  auto it = held_.find(at);
  if (it == held_.end() || --it->second.probes) return;
  if (guardian) guardian->unwatch_semaphore(at);
  held_.erase(it);
}

void Semaphores::lower_all(TraceeMemory& memory, Guardian* guardian) {
  while (!held_.empty()) {
    auto it = held_.begin();
    RuntimeAddr at = it->first;
    held_.erase(it);
    if (guardian) guardian->unwatch_semaphore(at);
    add(memory, at, -1);
  }
}

void Semaphores::lower_copy(TraceeMemory& child, const CopyHolds& holds) const {
  for (const auto& [at, h] : held_) {
    if (holds(h.witness)) add(child, at, -1);
  }
}

void Semaphores::adopt(const Semaphores& parent, const CopyHolds& holds) {
  for (const auto& [at, h] : parent.held_) {
    if (holds(h.witness)) held_[at] = h;
  }
}

void Semaphores::watch_all(Guardian& guardian) const {
  for (const auto& [at, h] : held_) guardian.watch_semaphore(at, h.file);
}

// TracedProcess's side: the semaphore's mapping, for the guardian's check after a death.
void TracedProcess::raise_semaphore(RuntimeAddr at, RuntimeAddr witness) {
  const Mapping* m = mapping_at(at);
  semaphores_.raise(memory_, at, m ? file_identity(*m, at) : trap::FileIdentity{}, guardian_.get(),
                    witness);
}

void TracedProcess::forget_semaphore(RuntimeAddr at) {
  semaphores_.forget(at, guardian_.get());
}

}  // namespace probecost
