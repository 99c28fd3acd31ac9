#include "breakpoint/in_tracee/jump_area.hpp"

#include <algorithm>
#include <cstring>

#include "breakpoint/in_tracee/area_format.hpp"
#include "breakpoint/x86/x86_asm.hpp"
#include "common/error.hpp"

namespace probecost::jump {

namespace {

using area::in;
using area::round_up;

constexpr std::uint64_t kTrampolineAlign = 64;  // a cache line each

// Of the whole header, its checksum and site_count taken as zero.
std::uint64_t checksum(const AreaHeader& h) {
  AreaHeader copy = h;
  copy.checksum = 0;
  copy.site_count = 0;
  return area::fnv1a({reinterpret_cast<const std::uint8_t*>(&copy), sizeof copy});
}

}  // namespace

AreaLayout AreaLayout::of(const AreaConfig& config) {
  AreaLayout l;
  l.site_capacity = config.max_sites;
  l.sites_offset = sizeof(AreaHeader);
  l.code_offset = round_up(l.sites_offset + sizeof(SiteEntry) * config.max_sites, kAreaPage);
  l.code_size = round_up(config.code_bytes, kAreaPage);
  l.size = l.code_offset + l.code_size;
  if (config.cpus) {
    l.cpus = config.cpus;
    l.rseq_offset = config.rseq_offset;
    l.counters_offset = l.size;
    l.counters_size = round_up(std::uint64_t{config.max_sites} * config.cpus * 64, kAreaPage);
    l.size += l.counters_size;
  }
  if (config.event_sites) {
    if (!valid_ring_capacity(config.ring_capacity)) {
      throw Error("ring capacity " + std::to_string(config.ring_capacity) +
                  " is not a power of two up to 2^31");
    }
    l.ring_count = config.event_sites;
    l.ring_capacity = config.ring_capacity;
    l.ring_stride = round_up(ring_bytes(config.ring_capacity), 64);
    l.rings_offset = l.size;
    l.rings_size = round_up(l.ring_stride * l.ring_count, kAreaPage);
    l.size += l.rings_size;
  }
  return l;
}

AreaWriter::AreaWriter(std::span<std::uint8_t> view, RuntimeAddr tracee_at,
                       const AreaLayout& layout, pid_t tracer_pid)
    : view_(view), at_(tracee_at), layout_(layout) {
  if (view.size() < layout.size) {
    throw Error("the area's mapping has " + std::to_string(view.size()) + " bytes, its layout " +
                std::to_string(layout.size));
  }
  AreaHeader& h = header();
  std::memset(&h, 0, sizeof h);
  area::write_identity(h, kAreaMagic, kAreaVersion, tracee_at, layout.size, tracer_pid);
  h.site_entry_size = sizeof(SiteEntry);
  h.site_capacity = layout.site_capacity;
  h.sites_offset = layout.sites_offset;
  h.code_offset = layout.code_offset;
  h.code_size = layout.code_size;
  h.rings_offset = layout.rings_offset;
  h.rings_size = layout.rings_size;
  h.ring_capacity = layout.ring_capacity;
  h.ring_stride = layout.ring_stride;
  h.ring_count = layout.ring_count;
  h.cpus = layout.cpus;
  h.counters_offset = layout.counters_offset;
  h.checksum = checksum(h);
}

SiteEntry& AreaWriter::entry(std::size_t i) const {
  return reinterpret_cast<SiteEntry*>(view_.data() + layout_.sites_offset)[i];
}

std::optional<Trampoline> AreaWriter::place_code(const JumpPlan& plan, const TrampolineSpec& spec,
                                                 std::string& why) {
  auto t = build_trampoline(plan, spec, why);
  if (!t) return std::nullopt;
  std::uint64_t offset = layout_.code_offset + code_used_;
  if (code_used_ + t->code.size() > layout_.code_size) {
    why = "the area's " + std::to_string(layout_.code_size) + " bytes of trampolines are full";
    return std::nullopt;
  }
  std::memcpy(view_.data() + offset, t->code.data(), t->code.size());
  code_used_ = round_up(code_used_ + t->code.size(), kTrampolineAlign);
  return t;
}

std::optional<PlacedSite> AreaWriter::add_site(const JumpPlan& plan, const SiteOptions& options,
                                               std::string& why) {
  const bool events = options.events && !options.calls;
  AreaHeader& h = header();
  std::size_t index = h.site_count;
  if (index >= layout_.site_capacity) {
    why = "the area's " + std::to_string(layout_.site_capacity) + " sites are all in use";
    return std::nullopt;
  }
  if (events && rings_used_ >= layout_.ring_count) {
    why = "the area's " + std::to_string(layout_.ring_count) + " rings for events are all in use";
    return std::nullopt;
  }
  RuntimeAddr code = tracee(layout_.code_offset + code_used_);
  if (!x86::within_rel32(plan.site, code, static_cast<std::int64_t>(layout_.size))) {
    why = "the site " + plan.site.hex() + " is beyond a jump's reach of the area at " + at_.hex();
    return std::nullopt;
  }
  SiteEntry& e = entry(index);
  TrampolineSpec spec;
  spec.address = code;
  spec.hit_counter =
      tracee(layout_.sites_offset + index * sizeof(SiteEntry) + offsetof(SiteEntry, hits));
  spec.flag_save = options.flag_save;
  spec.calls = options.calls;
  spec.stacks = options.stacks;
  if (layout_.cpus && !events && !options.calls) {
    spec.per_cpu = PerCpuCounter{tracee(counter_row(index)), layout_.cpus, layout_.rseq_offset};
  }
  std::uint32_t ring = rings_used_;
  if (events) {
    spec.events = EventTarget{tracee(layout_.rings_offset + ring * layout_.ring_stride),
                              layout_.ring_capacity, options.id};
  }
  auto t = place_code(plan, spec, why);
  if (!t) return std::nullopt;
  JumpPatch patch = JumpPatch::make(plan, t->address);
  e.address = plan.site.value();
  e.trampoline = t->address.value();
  e.hits = 0;
  e.id = options.id;
  e.length = static_cast<std::uint8_t>(plan.length);
  e.flags = static_cast<std::uint8_t>(
      (events ? kSiteEvents : 0) | (spec.flag_save != FlagSave::None ? kSitePreservesFlags : 0) |
      (spec.per_cpu ? kSitePerCpu : 0) | (spec.calls ? kSiteCalls : 0));
  e.ring = events ? static_cast<std::uint16_t>(ring) : 0;
  rings_used_ += events;
  std::memcpy(e.original, patch.original.data(), sizeof e.original);
  std::memcpy(e.patch, patch.patch.data(), sizeof e.patch);
  __atomic_store_n(&h.site_count, index + 1, __ATOMIC_RELEASE);
  return PlacedSite{index, std::move(*t), patch};
}

std::uint64_t AreaWriter::hits(std::size_t index) const {
  std::uint64_t sum = __atomic_load_n(&entry(index).hits, __ATOMIC_RELAXED);
  if (entry(index).flags & kSitePerCpu) {
    const std::uint8_t* row = view_.data() + counter_row(index);
    for (std::uint32_t cpu = 0; cpu < layout_.cpus; ++cpu) {
      sum +=
          __atomic_load_n(reinterpret_cast<const std::uint64_t*>(row + cpu * 64), __ATOMIC_RELAXED);
    }
  }
  return sum;
}

RingView AreaWriter::ring(std::size_t index) const {
  if (index >= header().site_count || !(entry(index).flags & kSiteEvents))
    throw Error("site " + std::to_string(index) + " of the jump area has no events");
  std::uint64_t offset = layout_.rings_offset + entry(index).ring * layout_.ring_stride;
  return RingView{&entry(index).hits, view_.data() + offset, layout_.ring_capacity};
}

namespace {

std::string check_header(const AreaHeader& h, std::size_t have, RuntimeAddr mapped_at) {
  if (auto why =
          area::check_identity(h, kAreaMagic, kAreaVersion, checksum(h), mapped_at, "jump area");
      !why.empty())
    return why;
  if (h.site_entry_size != sizeof(SiteEntry)) return "jump area site entry of an unexpected size";
  if (h.site_count > h.site_capacity) return "jump area site count above its capacity";
  if (!in(h.sites_offset, std::uint64_t{h.site_capacity} * sizeof(SiteEntry), h.area_size) ||
      h.sites_offset < sizeof(AreaHeader) || h.sites_offset % alignof(SiteEntry))
    return "jump area site table out of bounds";
  if (!in(h.code_offset, h.code_size, h.area_size)) return "jump area code region out of bounds";
  if (h.cpus && !in(h.counters_offset, std::uint64_t{h.site_capacity} * h.cpus * 64, h.area_size))
    return "jump area per-CPU counters out of bounds";
  if (h.ring_count &&
      (!valid_ring_capacity(h.ring_capacity) || h.ring_stride < ring_bytes(h.ring_capacity) ||
       h.ring_stride > h.area_size || !in(h.rings_offset, h.rings_size, h.area_size) ||
       h.rings_size / h.ring_stride < h.ring_count))
    return "jump area rings out of bounds";
  if (h.sites_offset + std::uint64_t{h.site_count} * sizeof(SiteEntry) > have)
    return "jump area truncated: " + std::to_string(have) + " bytes hold no whole site table";
  return {};
}

std::string check_site(const AreaHeader& h, const SiteEntry& e, std::size_t i) {
  std::string which = "jump area site " + std::to_string(i) + ": ";
  if (e.length < kJumpLength || e.length > kMaxPatchLength) return which + "bad patch length";
  RuntimeAddr code(h.area_address + h.code_offset);
  RuntimeAddr t(e.trampoline);
  if (t < code || t - code >= static_cast<std::int64_t>(h.code_size))
    return which + "trampoline outside the area's code";
  std::int32_t rel;
  std::memcpy(&rel, e.patch + 1, 4);
  if (e.patch[0] != kJmpRel32 || RuntimeAddr(e.address) + 5 + rel != t)
    return which + "its patch is not a jump to its trampoline";
  if (std::equal(e.original, e.original + e.length, e.patch))
    return which + "original and patch bytes are the same";
  if ((e.flags & kSiteEvents) && e.ring >= h.ring_count) return which + "no such ring";
  return {};
}

ParsedSite parsed(const SiteEntry& e) {
  ParsedSite s;
  s.patch.site = RuntimeAddr(e.address);
  s.patch.length = e.length;
  s.patch.trampoline = RuntimeAddr(e.trampoline);
  std::memcpy(s.patch.original.data(), e.original, sizeof e.original);
  std::memcpy(s.patch.patch.data(), e.patch, sizeof e.patch);
  s.hits = e.hits;
  s.id = e.id;
  s.flags = e.flags;
  s.ring = e.ring;
  return s;
}

}  // namespace

std::optional<ParsedArea> parse_area(std::span<const std::uint8_t> bytes, RuntimeAddr mapped_at,
                                     std::string& why) {
  if (bytes.size() < sizeof(AreaHeader)) {
    why = "jump area truncated: " + std::to_string(bytes.size()) + " bytes, its header needs " +
          std::to_string(sizeof(AreaHeader));
    return std::nullopt;
  }
  AreaHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (why = check_header(h, bytes.size(), mapped_at); !why.empty()) return std::nullopt;
  ParsedArea area{mapped_at, h.area_size, h.tracer_pid, {}};
  for (std::uint32_t i = 0; i < h.site_count; ++i) {
    SiteEntry e;
    std::memcpy(&e, bytes.data() + h.sites_offset + i * sizeof(SiteEntry), sizeof e);
    if (why = check_site(h, e, i); !why.empty()) return std::nullopt;
    area.sites.push_back(parsed(e));
    // A site that counts per CPU: its row of counters too, when the bytes reach them.
    std::uint64_t row = h.counters_offset + std::uint64_t{i} * h.cpus * 64;
    if ((e.flags & kSitePerCpu) && h.cpus && row + std::uint64_t{h.cpus} * 64 <= bytes.size()) {
      for (std::uint32_t cpu = 0; cpu < h.cpus; ++cpu) {
        std::uint64_t n;
        std::memcpy(&n, bytes.data() + row + cpu * 64, 8);
        area.sites.back().hits += n;
      }
    }
  }
  return area;
}

}  // namespace probecost::jump
