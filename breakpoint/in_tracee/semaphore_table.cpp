#include "breakpoint/in_tracee/semaphore_table.hpp"

#include <cstddef>
#include <cstring>

#include "breakpoint/in_tracee/area_format.hpp"

namespace probecost::sema {

namespace {

std::uint64_t checksum(const TableHeader& h) {
  TableHeader copy = h;
  copy.count = 0;
  return area::fnv1a(
      {reinterpret_cast<const std::uint8_t*>(&copy), offsetof(TableHeader, checksum)});
}

std::string check_header(const TableHeader& h, std::size_t have, RuntimeAddr mapped_at) {
  if (auto why =
          area::check_identity(h, kMagic, kVersion, checksum(h), mapped_at, "semaphore table");
      !why.empty())
    return why;
  if (h.area_size != kTableSize) return "semaphore table of an unexpected size";
  if (h.record_size != sizeof(TableRecord)) return "semaphore table record of an unexpected size";
  if (h.count > h.capacity) return "semaphore table count above its capacity";
  if (!area::in(sizeof(TableHeader), std::uint64_t{h.capacity} * sizeof(TableRecord), h.area_size))
    return "semaphore table records out of bounds";
  if (sizeof(TableHeader) + std::uint64_t{h.count} * sizeof(TableRecord) > have)
    return "semaphore table truncated: " + std::to_string(have) + " bytes";
  return {};
}

}  // namespace

TableWriter::TableWriter(TraceeMemory& memory, RuntimeAddr at, pid_t tracer_pid)
    : memory_(&memory), at_(at) {
  TableHeader h{};
  area::write_identity(h, kMagic, kVersion, at, kTableSize, tracer_pid);
  h.record_size = sizeof(TableRecord);
  h.capacity = kCapacity;
  h.checksum = checksum(h);
  memory.write(at, {reinterpret_cast<const std::uint8_t*>(&h), sizeof h});
}

std::optional<RuntimeAddr> TableWriter::add(RuntimeAddr semaphore, RuntimeAddr witness,
                                            const trap::FileIdentity& file) {
  if (count_ >= kCapacity) return std::nullopt;
  TableRecord r{};
  r.address = semaphore.value();
  r.witness = witness.value();
  r.dev = file.dev;
  r.inode = file.inode;
  r.offset = file.offset;
  r.state = kRaised;
  std::uint64_t off = sizeof(TableHeader) + std::uint64_t{count_} * sizeof(TableRecord);
  RuntimeAddr at = at_ + static_cast<std::int64_t>(off);
  memory_->write(at, {reinterpret_cast<const std::uint8_t*>(&r), sizeof r});
  // The count after the whole record: a reader never sees half of one.
  std::uint32_t count = ++count_;
  memory_->write(at_ + static_cast<std::int64_t>(offsetof(TableHeader, count)),
                 {reinterpret_cast<const std::uint8_t*>(&count), sizeof count});
  return at + static_cast<std::int64_t>(offsetof(TableRecord, state));
}

std::optional<ParsedTable> parse_table(std::span<const std::uint8_t> bytes, RuntimeAddr mapped_at,
                                       std::string& why) {
  if (bytes.size() < sizeof(TableHeader)) {
    why = "semaphore table truncated: " + std::to_string(bytes.size()) + " bytes";
    return std::nullopt;
  }
  TableHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (why = check_header(h, bytes.size(), mapped_at); !why.empty()) return std::nullopt;
  ParsedTable t;
  t.address = mapped_at;
  t.size = h.area_size;
  t.tracer_pid = h.tracer_pid;
  for (std::uint32_t i = 0; i < h.count; ++i) {
    std::uint64_t off = sizeof(TableHeader) + std::uint64_t{i} * sizeof(TableRecord);
    TableRecord r;
    std::memcpy(&r, bytes.data() + off, sizeof r);
    if (r.state == kEmpty) continue;
    if (r.state > kForgotten) {
      why = "semaphore table record " + std::to_string(i) + ": unknown state";
      return std::nullopt;
    }
    Raise x;
    x.address = RuntimeAddr(r.address);
    x.witness = RuntimeAddr(r.witness);
    x.file = {r.dev, r.inode, r.offset};
    x.state = r.state;
    x.state_at = mapped_at + static_cast<std::int64_t>(off + offsetof(TableRecord, state));
    t.records.push_back(x);
  }
  return t;
}

}  // namespace probecost::sema
