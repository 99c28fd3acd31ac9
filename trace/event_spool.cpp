#include "trace/event_spool.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>
#include <utility>

namespace probecost::trace_run {

// Written and read back by this process, as they lie in memory.
static_assert(std::is_trivially_copyable_v<record::Event>);

EventSpool::EventSpool(std::string dir, std::uint64_t limit) : dir_(std::move(dir)), limit_(limit) {
  batch_.reserve(kBatch);
}

void EventSpool::push(const record::Event& e) {
  if (!error_.empty()) return count_not_kept(e);
  batch_.push_back(e);
  if (batch_.size() >= kBatch) flush();
}

void EventSpool::count_not_kept(const record::Event& e) {
  if (e.probe >= not_kept_.size()) {
    not_kept_.resize(e.probe + 1);
    not_kept_entries_.resize(e.probe + 1);
    not_kept_exits_.resize(e.probe + 1);
  }
  ++not_kept_[e.probe];
  if (e.kind == record::EventKind::entry) ++not_kept_entries_[e.probe];
  if (e.kind == record::EventKind::exit) ++not_kept_exits_[e.probe];
}

// The batch's events not kept: counted, by probe.
void EventSpool::refuse() {
  for (const record::Event& e : batch_) count_not_kept(e);
  batch_.clear();
}

void EventSpool::flush() {
  if (batch_.empty() || !error_.empty()) return refuse();
  const std::size_t bytes = batch_.size() * sizeof(record::Event);
  if ((written_ * sizeof(record::Event)) + bytes > limit_) {
    error_ = "the int3 events' spool reached its bound of " + std::to_string(limit_ >> 20) + " MiB";
    return refuse();
  }
  try {
    if (!fd_) fd_ = spool_file(dir_);
  } catch (const Error& e) {
    error_ = e.what();
    return refuse();
  }
  const auto* data = reinterpret_cast<const char*>(batch_.data());
  for (std::size_t done = 0; done < bytes;) {
    ssize_t n = ::write(fd_.get(), data + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = "the int3 events' spool in " + dir_ + " could not be written after " +
               std::to_string(written_) + " events (" +
               (n < 0 ? std::strerror(errno) : "no progress") + ")";
      // Cut back to the last whole batch: what the file holds stays readable.
      off_t keep = static_cast<off_t>(written_ * sizeof(record::Event));
      if (::ftruncate(fd_.get(), keep) == 0) ::lseek(fd_.get(), keep, SEEK_SET);
      return refuse();
    }
    done += static_cast<std::size_t>(n);
  }
  written_ += batch_.size();
  batch_.clear();
}

EventSpool::Reader::Reader(EventSpool& spool) : spool_(spool) {
  if (!spool_.written_) {
    // Never written: the batch in memory is the whole of it.
    buf_.swap(spool_.batch_);
    in_memory_ = true;
    return;
  }
  spool_.flush();
}

bool EventSpool::Reader::refill() {
  if (in_memory_ || next_ >= spool_.written_) return false;
  std::size_t n =
      static_cast<std::size_t>(std::min<std::uint64_t>(kBatch, spool_.written_ - next_));
  buf_.resize(n);
  auto* to = reinterpret_cast<char*>(buf_.data());
  const std::size_t bytes = n * sizeof(record::Event);
  const off_t from = static_cast<off_t>(next_ * sizeof(record::Event));
  for (std::size_t done = 0; done < bytes;) {
    ssize_t r = ::pread(spool_.fd_.get(), to + done, bytes - done, from + static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw Error::from_errno("cannot read the int3 events' spool", r < 0 ? errno : EIO);
    done += static_cast<std::size_t>(r);
  }
  next_ += n;
  at_ = 0;
  return true;
}

void EventSpool::clear() {
  batch_.clear();
  batch_.shrink_to_fit();
  fd_ = Fd();
  written_ = 0;
}

}  // namespace probecost::trace_run
