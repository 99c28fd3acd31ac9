#include "tracer/core/semaphores.hpp"

#include <cstring>

#include "common/error.hpp"
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

void Semaphores::mark(TraceeMemory& memory, const Held& h, std::uint8_t state) const {
  if (table_ && h.record != RuntimeAddr()) table_->copy_for(memory).set_state(h.record, state);
}

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
  // Recorded after the raise, so that restore never lowers a count that was not raised. A
  // full table, or one that cannot be written: the guardian alone stands for it.
  try {
    if (table_) h.record = table_->add(at, witness, file).value_or(RuntimeAddr());
  } catch (const Error&) {
  }
  if (guardian) guardian->watch_semaphore(at, file, h.record);
}

void Semaphores::forget(RuntimeAddr at, Guardian* guardian) {
  auto it = held_.find(at);
  if (it == held_.end() || --it->second.probes) return;
  if (guardian) guardian->unwatch_semaphore(at);
  if (table_ && it->second.record != RuntimeAddr()) {
    try {
      table_->set_state(it->second.record, sema::kForgotten);
    } catch (const Error&) {
    }
  }
  held_.erase(it);
}

void Semaphores::lower_all(TraceeMemory& memory, Guardian* guardian) {
  while (!held_.empty()) {
    auto it = held_.begin();
    RuntimeAddr at = it->first;
    Held h = it->second;
    held_.erase(it);
    if (guardian) guardian->unwatch_semaphore(at);
    // Marked first: a death between the two leaves it one too high, never lowered twice.
    mark(memory, h, sema::kLowered);
    add(memory, at, -1);
  }
}

void Semaphores::lower_copy(TraceeMemory& child, const CopyHolds& holds) const {
  for (const auto& [at, h] : held_) {
    if (!holds(h.witness)) continue;
    mark(child, h, sema::kLowered);  // its copy of the table holds the record with the raise
    add(child, at, -1);
  }
}

void Semaphores::adopt(const Semaphores& parent, const CopyHolds& holds, TraceeMemory& memory) {
  for (const auto& [at, h] : parent.held_) {
    if (holds(h.witness)) held_[at] = h;
  }
  // Mapped before the first raise: a copy that holds one holds the table.
  if (!held_.empty() && parent.table_) table_ = parent.table_->copy_for(memory);
}

void Semaphores::watch_all(Guardian& guardian) const {
  for (const auto& [at, h] : held_) guardian.watch_semaphore(at, h.file, h.record);
}

}  // namespace probecost
