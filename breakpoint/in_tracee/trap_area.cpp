#include "breakpoint/in_tracee/trap_area.hpp"

#include <cstddef>
#include <cstring>

#include "breakpoint/in_tracee/area_format.hpp"
#include "breakpoint/in_tracee/trap_handler.hpp"
#include "common/error.hpp"

namespace probecost::trap {

namespace {

using area::in;
using area::round_up;

// Of the header's fixed part (up to the checksum), record_count taken as zero.
std::uint64_t checksum(const TrapHeader& h) {
  TrapHeader copy = h;
  copy.record_count = 0;
  return area::fnv1a(
      {reinterpret_cast<const std::uint8_t*>(&copy), offsetof(TrapHeader, checksum)});
}

}  // namespace

Layout Layout::of(std::uint32_t records, bool code, std::uint32_t copies) {
  Layout l;
  l.record_capacity = records;
  l.records_offset = sizeof(TrapHeader);
  l.size = round_up(l.records_offset + std::uint64_t{records} * sizeof(TrapRecord), kPage);
  if (code) {
    l.code_offset = l.size;
    l.code_size = kPage;
    l.copies_offset = l.code_offset + l.code_size;
    l.copies_size = round_up(std::uint64_t{copies} * kCopySlot, kPage);
    l.size = l.copies_offset + l.copies_size;
  }
  return l;
}

AreaWriter::AreaWriter(TraceeMemory& memory, RuntimeAddr at, const Layout& layout, pid_t tracer_pid)
    : AreaWriter(memory, at, layout) {
  TrapHeader h{};
  area::write_identity(h, kMagic, kVersion, at, layout.size, tracer_pid);
  h.record_size = sizeof(TrapRecord);
  h.record_capacity = layout.record_capacity;
  h.records_offset = layout.records_offset;
  h.code_offset = layout.code_offset;
  h.code_size = layout.code_size;
  if (layout.code_size) {
    HandlerCode code = handler_code(at, layout);
    memory.write(this->code(), code.bytes);
    handler_offset_ = code.handler_offset;
    restorer_offset_ = code.restorer_offset;
    for (const auto& c : code.calls) {
      calls_.push_back({c.nr, this->code() + static_cast<std::int64_t>(c.offset)});
    }
    h.handler = handler().value();
    h.restorer = restorer().value();
  }
  h.checksum = checksum(h);
  memory.write(at, {reinterpret_cast<const std::uint8_t*>(&h), sizeof h});
}

RuntimeAddr AreaWriter::handler() const {
  return code() + static_cast<std::int64_t>(handler_offset_);
}

RuntimeAddr AreaWriter::restorer() const {
  return code() + static_cast<std::int64_t>(restorer_offset_);
}

RuntimeAddr AreaWriter::dfl() const {
  return at_ + static_cast<std::int64_t>(offsetof(TrapHeader, dfl));
}

RuntimeAddr AreaWriter::record_at(std::uint32_t i) const {
  return at_ + static_cast<std::int64_t>(layout_.records_offset + i * sizeof(TrapRecord));
}

template <typename T>
void AreaWriter::put(std::uint64_t offset, const T& value) {
  memory_->write(at_ + static_cast<std::int64_t>(offset),
                 {reinterpret_cast<const std::uint8_t*>(&value), sizeof value});
}

std::optional<RuntimeAddr> AreaWriter::place_copy(const Instruction& in, std::string& why) {
  if (copies_used_ + kCopySlot > layout_.copies_size) {
    why = "the trap area's " + std::to_string(layout_.copies_size / kCopySlot) +
          " copy slots are full";
    return std::nullopt;
  }
  RuntimeAddr slot = at_ + static_cast<std::int64_t>(layout_.copies_offset + copies_used_);
  auto bytes = resume_copy(in, slot, why);
  if (bytes.empty()) return std::nullopt;
  if (bytes.size() > kCopySlot) {
    why = "its copy takes " + std::to_string(bytes.size()) + " bytes";
    return std::nullopt;
  }
  memory_->write(slot, bytes);
  copies_used_ += kCopySlot;
  return slot;
}

bool AreaWriter::add(const SiteRecord& r) {
  if (full()) return false;
  TrapRecord t{};
  t.site = r.site.value();
  t.resume = r.resume.value();
  std::memcpy(t.moved, r.moved.data(), sizeof t.moved);
  t.dev = r.file.dev;
  t.inode = r.file.inode;
  t.offset = r.file.offset;
  t.state = r.installed ? kInstalled : kRemoved;
  t.original = r.original;
  t.patched = r.patched;
  t.length = r.length;
  memory_->write(record_at(count_), {reinterpret_cast<const std::uint8_t*>(&t), sizeof t});
  sites_.push_back(r.site);
  resumes_.push_back(r.resume.value() != 0);
  ++count_;
  put(offsetof(TrapHeader, record_count), count_);
  return true;
}

void AreaWriter::set_moved(RuntimeAddr site, std::size_t i, RuntimeAddr to) {
  for (std::uint32_t r = 0; r < count_; ++r) {
    if (sites_[r] == site)
      put(layout_.records_offset + r * sizeof(TrapRecord) + offsetof(TrapRecord, moved) + 8 * i,
          to.value());
  }
}

void AreaWriter::set_resume_if_none(RuntimeAddr site, RuntimeAddr to) {
  for (std::uint32_t r = 0; r < count_; ++r) {
    if (sites_[r] != site || resumes_[r]) continue;
    put(layout_.records_offset + r * sizeof(TrapRecord) + offsetof(TrapRecord, resume), to.value());
    resumes_[r] = true;
  }
}

bool AreaWriter::remove(RuntimeAddr site) {
  bool found = false;
  for (std::uint32_t i = 0; i < count_; ++i) {
    if (sites_[i] != site) continue;
    put(layout_.records_offset + i * sizeof(TrapRecord) + offsetof(TrapRecord, state), kRemoved);
    found = true;
  }
  return found;
}

void AreaWriter::remove_all() {
  for (std::uint32_t i = 0; i < count_; ++i) {
    put(layout_.records_offset + i * sizeof(TrapRecord) + offsetof(TrapRecord, state), kRemoved);
  }
}

void AreaWriter::set_dispositions(const KernelSigaction& program, const KernelSigaction& ours) {
  put(offsetof(TrapHeader, program), program);
  put(offsetof(TrapHeader, ours), ours);
}

void AreaWriter::set_state(HandlerState s) {
  put(offsetof(TrapHeader, handler_state), static_cast<std::uint32_t>(s));
}

namespace {

std::string check_header(const TrapHeader& h, std::size_t have, RuntimeAddr mapped_at) {
  if (auto why = area::check_identity(h, kMagic, kVersion, checksum(h), mapped_at, "trap area");
      !why.empty())
    return why;
  if (h.record_size != sizeof(TrapRecord)) return "trap area record of an unexpected size";
  if (h.record_count > h.record_capacity) return "trap area record count above its capacity";
  if (h.records_offset < sizeof(TrapHeader) ||
      !in(h.records_offset, std::uint64_t{h.record_capacity} * sizeof(TrapRecord), h.area_size))
    return "trap area records out of bounds";
  if (!in(h.code_offset, h.code_size, h.area_size)) return "trap area code out of bounds";
  RuntimeAddr code(h.area_address + h.code_offset);
  if (h.handler && (RuntimeAddr(h.handler) < code ||
                    RuntimeAddr(h.handler) - code >= static_cast<std::int64_t>(h.code_size)))
    return "trap area handler outside its code";
  if (h.handler_state > static_cast<std::uint32_t>(HandlerState::PutBack))
    return "trap area handler state unknown";
  if (h.records_offset + std::uint64_t{h.record_count} * sizeof(TrapRecord) > have)
    return "trap area truncated: " + std::to_string(have) + " bytes hold no whole record table";
  return {};
}

std::string check_record(const TrapRecord& r, std::uint32_t i) {
  std::string which = "trap area record " + std::to_string(i) + ": ";
  if (r.state != kInstalled && r.state != kRemoved) return which + "unknown state";
  if (r.patched != 0xCC) return which + "its patch is not an int3";
  if (r.original == 0xCC) return which + "its original byte is an int3";
  if (r.length == 0 || r.length > 15) return which + "bad instruction length";
  return {};
}

SiteRecord parsed(const TrapRecord& t) {
  SiteRecord r;
  r.site = RuntimeAddr(t.site);
  r.resume = RuntimeAddr(t.resume);
  std::memcpy(r.moved.data(), t.moved, sizeof t.moved);
  r.file = {t.dev, t.inode, t.offset};
  r.original = t.original;
  r.patched = t.patched;
  r.length = t.length;
  r.installed = t.state == kInstalled;
  return r;
}

}  // namespace

std::optional<ParsedArea> parse_area(std::span<const std::uint8_t> bytes, RuntimeAddr mapped_at,
                                     std::string& why) {
  if (bytes.size() < sizeof(TrapHeader)) {
    why = "trap area truncated: " + std::to_string(bytes.size()) + " bytes";
    return std::nullopt;
  }
  TrapHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (why = check_header(h, bytes.size(), mapped_at); !why.empty()) return std::nullopt;
  ParsedArea area;
  area.address = mapped_at;
  area.size = h.area_size;
  area.records_offset = h.records_offset;
  area.tracer_pid = h.tracer_pid;
  area.handler = RuntimeAddr(h.handler);
  area.state = static_cast<HandlerState>(h.handler_state);
  area.program = h.program;
  area.ours = h.ours;
  for (std::uint32_t i = 0; i < h.record_count; ++i) {
    TrapRecord t;
    std::memcpy(&t, bytes.data() + h.records_offset + i * sizeof(TrapRecord), sizeof t);
    if (why = check_record(t, i); !why.empty()) return std::nullopt;
    area.records.push_back(parsed(t));
    area.records.back().index = i;
  }
  return area;
}

RuntimeAddr state_byte(const ParsedArea& area, const SiteRecord& r) {
  return area.address +
         static_cast<std::int64_t>(area.records_offset + r.index * sizeof(TrapRecord) +
                                   offsetof(TrapRecord, state));
}

}  // namespace probecost::trap
