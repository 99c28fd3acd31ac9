#include "breakpoint/x86/eh_tables.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

namespace probecost {

namespace {

// DW_EH_PE_* (LSB Core, "DWARF Exception Header Encoding").
constexpr std::uint8_t kOmit = 0xff;
constexpr std::uint8_t kFormat = 0x0f, kApplication = 0x70, kIndirect = 0x80;
constexpr std::uint8_t kAbsptr = 0x00, kUleb = 0x01, kUdata2 = 0x02, kUdata4 = 0x03, kUdata8 = 0x04,
                       kSleb = 0x09, kSdata2 = 0x0a, kSdata4 = 0x0b, kSdata8 = 0x0c;
constexpr std::uint8_t kPcrel = 0x10, kFuncrel = 0x40, kAligned = 0x50;

// Reads little-endian fields from `bytes`, never past their end: a read that would go past
// marks the reader failed and gives 0, and so does every read after it.
class Reader {
 public:
  Reader(const LoadedBytes& where, std::size_t pos, std::size_t end)
      : where_(where), pos_(pos), end_(std::min(end, where.bytes.size())) {
    if (pos_ > end_) fail(), pos_ = end_;
  }

  bool failed() const { return failed_; }
  std::size_t pos() const { return pos_; }
  FileAddr here() const { return where_.address + static_cast<std::int64_t>(pos_); }
  void seek(std::size_t pos) {
    if (pos > end_) failed_ = true;
    pos_ = std::min(pos, end_);
  }
  bool at_end() const { return failed_ || pos_ >= end_; }

  std::uint64_t fixed(std::size_t n) {
    if (failed_ || end_ - pos_ < n) return fail();
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t{where_.bytes[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  std::uint64_t uleb() {
    std::uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
      std::uint8_t b = static_cast<std::uint8_t>(fixed(1));
      if (failed_ || shift > 63) return fail();
      v |= std::uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) return v;
    }
  }
  std::int64_t sleb() {
    std::uint64_t v = 0;
    unsigned shift = 0;
    std::uint8_t b;
    do {
      b = static_cast<std::uint8_t>(fixed(1));
      if (failed_ || shift > 63) return static_cast<std::int64_t>(fail());
      v |= std::uint64_t{b & 0x7fu} << shift;
      shift += 7;
    } while (b & 0x80);
    if (shift < 64 && (b & 0x40)) v |= ~std::uint64_t{0} << shift;
    return static_cast<std::int64_t>(v);
  }
  std::string cstring() {
    std::string s;
    for (char c; !failed_ && (c = static_cast<char>(fixed(1))) != 0;) s += c;
    return s;
  }
  // A value in the encoding's format alone (call-site table fields, an FDE's range).
  std::optional<std::uint64_t> value(std::uint8_t enc) {
    switch (enc & kFormat) {
      case kAbsptr:
      case kUdata8:
      case kSdata8:
        return fixed(8);
      case kUleb:
        return uleb();
      case kUdata2:
        return fixed(2);
      case kUdata4:
        return fixed(4);
      case kSleb:
        return static_cast<std::uint64_t>(sleb());
      case kSdata2:
        return static_cast<std::uint64_t>(static_cast<std::int16_t>(fixed(2)));
      case kSdata4:
        return static_cast<std::uint64_t>(static_cast<std::int32_t>(fixed(4)));
      default:
        failed_ = true;  // its size is unknown: nothing after it can be read
        return std::nullopt;
    }
  }

 private:
  std::uint64_t fail() {
    failed_ = true;
    return 0;
  }
  const LoadedBytes& where_;
  std::size_t pos_, end_;
  bool failed_ = false;
};

struct PointerRules {
  bool absolute_ok = false;
  std::optional<FileAddr> function;  // the base of DW_EH_PE_funcrel
  bool may_be_indirect = false;      // only skipped (a personality routine)
};

// An encoded pointer; nothing when it cannot be known from the file (an indirect or absolute
// one that a relocation fills in, a base this reader does not know). The reader moves past it
// whenever its size is known.
std::optional<FileAddr> pointer(Reader& r, std::uint8_t enc, const PointerRules& rules) {
  FileAddr field = r.here();
  if ((enc & kApplication) == kAligned) {
    r.seek(r.pos() + ((8 - field.value() % 8) % 8));
    auto v = r.value(kAbsptr);
    if (!v || !rules.absolute_ok) return std::nullopt;
    return FileAddr(*v);
  }
  auto v = r.value(enc);
  if (!v || r.failed()) return std::nullopt;
  if ((enc & kIndirect) && !rules.may_be_indirect) return std::nullopt;
  switch (enc & kApplication) {
    case 0:
      if (!rules.absolute_ok) return std::nullopt;
      return FileAddr(*v);
    case kPcrel:
      return field + static_cast<std::int64_t>(*v);
    case kFuncrel:
      if (!rules.function) return std::nullopt;
      return *rules.function + static_cast<std::int64_t>(*v);
    default:  // textrel, datarel: bases a module's file does not give
      return std::nullopt;
  }
}

struct Cie {
  bool ok = false;
  std::string why;
  bool has_z = false;
  std::uint8_t fde_enc = kAbsptr, lsda_enc = kOmit;
};

Cie parse_cie(const LoadedBytes& eh, std::size_t body, std::size_t end, bool absolute_ok) {
  Cie c;
  Reader r(eh, body + 4, end);  // after the CIE id
  std::uint8_t version = static_cast<std::uint8_t>(r.fixed(1));
  std::string aug = r.cstring();
  r.uleb();  // code alignment
  r.sleb();  // data alignment
  std::uint64_t return_register = version == 1 ? r.fixed(1) : r.uleb();
  (void)return_register;
  if (r.failed() || aug.empty() || aug[0] != 'z') {
    c.ok = !r.failed() && aug.find_first_not_of("z") == std::string::npos;
    if (!c.ok) c.why = "a CIE with augmentation \"" + aug + "\"";
    return c;
  }
  c.has_z = true;
  r.uleb();  // the augmentation data's length: its fields are read one by one instead
  for (char ch : aug.substr(1)) {
    if (ch == 'L') {
      c.lsda_enc = static_cast<std::uint8_t>(r.fixed(1));
    } else if (ch == 'R') {
      c.fde_enc = static_cast<std::uint8_t>(r.fixed(1));
    } else if (ch == 'P') {
      auto enc = static_cast<std::uint8_t>(r.fixed(1));
      pointer(r, enc, {absolute_ok, std::nullopt, true});
    } else if (ch != 'S' && ch != 'B') {
      c.why = "a CIE with augmentation \"" + aug + "\"";
      return c;
    }
  }
  c.ok = !r.failed();
  if (!c.ok) c.why = "a truncated CIE";
  return c;
}

// Finds the section holding `at`.
const LoadedBytes* section_at(std::span<const LoadedBytes> sections, FileAddr at) {
  for (const auto& s : sections) {
    if (at >= s.address && at - s.address < static_cast<std::int64_t>(s.bytes.size())) return &s;
  }
  return nullptr;
}

// The call-site table of the LSDA at `lsda` of the function at `function`: its landing pads, or
// the reason it cannot be read.
std::string parse_lsda(std::span<const LoadedBytes> sections, FileAddr lsda, FileAddr function,
                       bool absolute_ok, std::vector<LandingPad>& pads) {
  const LoadedBytes* s = section_at(sections, lsda);
  if (!s) return "its LSDA at " + lsda.hex() + " is in no section of the file";
  Reader r(*s, static_cast<std::size_t>(lsda - s->address), s->bytes.size());
  auto lpstart_enc = static_cast<std::uint8_t>(r.fixed(1));
  std::optional<FileAddr> lpstart = function;
  if (lpstart_enc != kOmit) lpstart = pointer(r, lpstart_enc, {absolute_ok, function, false});
  if (!lpstart) return "its LSDA's landing pad base cannot be read";
  if (static_cast<std::uint8_t>(r.fixed(1)) != kOmit) r.uleb();  // the type table's offset
  auto cs_enc = static_cast<std::uint8_t>(r.fixed(1));
  if (cs_enc & kApplication) return "its call-site table has a pointer encoding";
  std::uint64_t cs_size = r.uleb();
  if (r.failed() || cs_size > s->bytes.size() - r.pos()) return "its LSDA is truncated";
  std::size_t cs_end = r.pos() + static_cast<std::size_t>(cs_size);
  Reader table(*s, r.pos(), cs_end);
  while (!table.at_end()) {
    auto start = table.value(cs_enc), length = table.value(cs_enc), pad = table.value(cs_enc);
    table.uleb();  // action
    if (table.failed() || !start || !length || !pad) return "its call-site table is truncated";
    if (*pad) {
      pads.push_back({*lpstart + static_cast<std::int64_t>(*pad),
                      function + static_cast<std::int64_t>(*start)});
    }
  }
  return {};
}

class Walker {
 public:
  Walker(const LoadedBytes& eh, std::span<const LoadedBytes> sections, bool absolute_ok)
      : eh_(eh), sections_(sections), absolute_ok_(absolute_ok) {}

  EhTables walk() {
    for (std::size_t pos = 0; pos + 4 <= eh_.bytes.size();) {
      Reader r(eh_, pos, eh_.bytes.size());
      std::uint64_t length = r.fixed(4);
      if (length == 0) break;  // the terminator
      std::size_t body = r.pos();
      if (length == 0xffffffff || length > eh_.bytes.size() - body || length < 4) {
        unknown_all("an .eh_frame entry at offset " + std::to_string(pos) +
                    (length == 0xffffffff ? " in the 64-bit format" : " runs past the section"));
        break;
      }
      std::size_t end = body + static_cast<std::size_t>(length);
      auto id = static_cast<std::uint32_t>(r.fixed(4));
      if (id != 0) fde(body, end, id);
      pos = end;
    }
    std::sort(out_.pads.begin(), out_.pads.end(),
              [](const LandingPad& a, const LandingPad& b) { return a.pad < b.pad; });
    return std::move(out_);
  }

 private:
  void unknown(FileAddr lo, FileAddr hi, const std::string& why) {
    out_.unknown.emplace_back(lo, hi);
    if (out_.why_unknown.empty()) out_.why_unknown = why;
  }
  void unknown_all(const std::string& why) {
    unknown(FileAddr(0), FileAddr(std::numeric_limits<std::uint64_t>::max()), why);
  }

  const Cie& cie_at(std::size_t id_field, std::uint32_t id) {
    std::size_t at = id_field >= id ? id_field - id : eh_.bytes.size();
    auto it = cies_.find(at);
    if (it != cies_.end()) return it->second;
    Cie c;
    c.why = "an FDE whose CIE is not in .eh_frame";
    Reader r(eh_, at, eh_.bytes.size());
    std::uint64_t length = r.fixed(4);
    if (!r.failed() && length != 0xffffffff && length <= eh_.bytes.size() - r.pos() &&
        r.fixed(4) == 0 && !r.failed()) {
      c = parse_cie(eh_, at + 4, at + 4 + static_cast<std::size_t>(length), absolute_ok_);
    }
    return cies_.emplace(at, c).first->second;
  }

  void fde(std::size_t body, std::size_t end, std::uint32_t id) {
    ++out_.fdes;
    const Cie& c = cie_at(body, id);
    if (!c.ok) return unknown_all(c.why);
    if (!c.has_z || c.lsda_enc == kOmit) return;  // no LSDA: no landing pads
    Reader r(eh_, body + 4, end);
    auto start = pointer(r, c.fde_enc, {absolute_ok_, std::nullopt, false});
    auto range = r.value(c.fde_enc & kFormat);
    std::uint64_t data_size = r.uleb();
    std::size_t data_end =
        r.pos() + static_cast<std::size_t>(std::min<std::uint64_t>(data_size, end));
    if (!start || !range || r.failed()) {
      return unknown_all("an FDE whose function address cannot be read from the file");
    }
    FileAddr hi = *start + static_cast<std::int64_t>(*range);
    // An LSDA pointer of 0 (in any encoding but pcrel, whose 0 is resolved here) means none.
    Reader peek = r;
    auto raw = peek.value(c.lsda_enc);
    if (raw && *raw == 0) return;
    auto lsda = pointer(r, c.lsda_enc, {absolute_ok_, *start, false});
    if (!lsda || r.pos() > data_end) {
      return unknown(
          *start, hi,
          "the LSDA pointer of the function at " + start->hex() + " cannot be read from the file");
    }
    ++out_.lsdas;
    std::string why = parse_lsda(sections_, *lsda, *start, absolute_ok_, out_.pads);
    if (!why.empty()) unknown(*start, hi, "the function at " + start->hex() + ": " + why);
  }

  const LoadedBytes& eh_;
  std::span<const LoadedBytes> sections_;
  bool absolute_ok_;
  std::map<std::size_t, Cie> cies_;
  EhTables out_;
};

}  // namespace

EhTables read_eh_tables(const LoadedBytes& eh_frame, std::span<const LoadedBytes> sections,
                        bool absolute_ok) {
  return Walker(eh_frame, sections, absolute_ok).walk();
}

}  // namespace probecost
