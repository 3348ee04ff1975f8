#include "core/atomic_file.hpp"

#include "core/error.hpp"

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <random>
#include <streambuf>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

namespace stepsim {

namespace fs = std::filesystem;

namespace {

bool write_all(int fd, const char* p, std::size_t left) {
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  return true;
}

// ---- temporary files removed on a signal ----------------------------------------------------
// A fixed table the handler can read without allocating: a slot is claimed with `state` 0 -> 1,
// filled, then published with 1 -> 2; the handler removes published slots of its own process
// (a forked child inherits the table but must not remove its parent's files).

constexpr std::size_t kSlots = 64;
constexpr std::size_t kPathBytes = 4096;

struct Slot {
  std::atomic<int> state{0};
  pid_t owner = 0;
  char path[kPathBytes] = {};
};

std::array<Slot, kSlots> g_slots;

int register_temporary(const fs::path& path) {
  const std::string text = path.string();
  if (text.size() >= kPathBytes)
    return -1;
  for (std::size_t i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_slots[i].path, text.c_str(), text.size() + 1);
      g_slots[i].owner = ::getpid();
      g_slots[i].state.store(2);
      return static_cast<int>(i);
    }
  }
  return -1; // table full: still removed on every path but a signal
}

void unregister_temporary(int slot) {
  if (slot >= 0)
    g_slots[static_cast<std::size_t>(slot)].state.store(0);
}

void write_stderr(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

extern "C" void on_interrupt(int sig) {
  const pid_t self = ::getpid();
  for (Slot& slot : g_slots)
    if (slot.state.load() == 2 && slot.owner == self)
      ::unlink(slot.path);
  write_stderr(sig == SIGINT    ? "stepsim: interrupted (SIGINT); no partial output left\n"
               : sig == SIGTERM ? "stepsim: terminated (SIGTERM); no partial output left\n"
                                : "stepsim: hung up (SIGHUP); no partial output left\n");
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// ---- temporary file names -------------------------------------------------------------------

constexpr std::string_view kMarker = ".stepsim-";
constexpr std::string_view kSuffix = ".tmp";

/// ".TARGET.stepsim-PID-RANDOM.tmp" beside `target` (the target's name cut to stay within
/// NAME_MAX).
fs::path temporary_name(const fs::path& target) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char random[17];
  std::snprintf(random, sizeof random, "%016llx", static_cast<unsigned long long>(rng()));
  const std::string stem = target.filename().string().substr(0, 160);
  return target.parent_path() / ("." + stem + std::string(kMarker) + std::to_string(::getpid()) + "-" +
                                 random + std::string(kSuffix));
}

/// The pid in a temporary file's name, or 0 when `name` is not one.
pid_t temporary_owner(const std::string& name) {
  if (name.size() < kMarker.size() + kSuffix.size() + 2 || name.front() != '.' || !name.ends_with(kSuffix))
    return 0;
  const auto marker = name.rfind(kMarker);
  if (marker == std::string::npos)
    return 0;
  const std::string rest = name.substr(marker + kMarker.size());
  const auto dash = rest.find('-');
  if (dash == std::string::npos || dash == 0 || rest.size() != dash + 1 + 16 + kSuffix.size())
    return 0;
  pid_t pid = 0;
  for (std::size_t i = 0; i < dash; ++i) {
    if (rest[i] < '0' || rest[i] > '9' || pid > 100000000)
      return 0;
    pid = pid * 10 + (rest[i] - '0');
  }
  for (std::size_t i = dash + 1; i < dash + 17; ++i)
    if (std::strchr("0123456789abcdef", rest[i]) == nullptr)
      return 0;
  return pid;
}

/// A stream buffer over a file descriptor that remembers the first write error.
class FdBuffer : public std::streambuf {
public:
  explicit FdBuffer(int fd) : fd_(fd) { setp(buffer_.data(), buffer_.data() + buffer_.size()); }
  [[nodiscard]] int error() const { return error_; }

protected:
  int_type overflow(int_type c) override {
    if (!drain())
      return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

private:
  bool drain() {
    const std::size_t n = static_cast<std::size_t>(pptr() - pbase());
    if (n > 0 && error_ == 0 && !write_all(fd_, pbase(), n))
      error_ = errno != 0 ? errno : EIO;
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return error_ == 0;
  }

  int fd_;
  int error_ = 0;
  std::array<char, 1 << 16> buffer_{};
};

/// A temporary file being written: created exclusively, removed unless committed.
class Temporary {
public:
  explicit Temporary(const fs::path& target) : target_(target) {
    for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
      path_ = temporary_name(target);
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST)
        break;
    }
    if (fd_ < 0)
      throw Error("cannot write " + target.string() + ": " + std::strerror(errno) +
                  " (creating a temporary file in " +
                  (target.has_parent_path() ? target.parent_path().string() : std::string(".")) + ")");
    slot_ = register_temporary(fs::absolute(path_));
  }
  Temporary(const Temporary&) = delete;
  Temporary& operator=(const Temporary&) = delete;
  ~Temporary() {
    if (fd_ >= 0)
      ::close(fd_);
    if (!committed_)
      ::unlink(path_.c_str());
    unregister_temporary(slot_);
  }

  /// Runs `write` into the file, then flushes it to disk; throws naming the target and reason.
  void fill(const std::function<void(std::ostream&)>& write) {
    FdBuffer buffer(fd_);
    std::ostream out(&buffer);
    try {
      write(out);
      out.flush();
    } catch (const Error&) {
      if (buffer.error() == 0)
        throw; // not a write error: the writer's own message
    }
    int error = buffer.error();
    if (error == 0 && !out)
      error = EIO;
    if (error == 0 && ::fsync(fd_) != 0)
      error = errno;
    if (::close(fd_) != 0 && error == 0)
      error = errno;
    fd_ = -1;
    if (error != 0)
      throw Error("cannot write " + target_.string() + ": " + std::strerror(error));
  }

  /// Renames the file over its target.
  void commit() {
    if (::rename(path_.c_str(), target_.c_str()) != 0)
      throw Error("cannot write " + target_.string() + ": " + std::strerror(errno) + " (renaming " +
                  path_.filename().string() + " into place)");
    committed_ = true;
  }

private:
  fs::path target_;
  fs::path path_;
  int fd_ = -1;
  int slot_ = -1;
  bool committed_ = false;
};

void prepare_directory(const fs::path& dir) {
  if (dir.empty())
    return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw Error("cannot create directory " + dir.string() + ": " + ec.message());
  remove_stale_temporaries(dir);
}

void refuse_directory(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(path, ec)))
    throw Error("cannot write " + path.string() + ": it is a directory");
}

} // namespace

bool is_temporary_name(const std::string& name) {
  return temporary_owner(name) != 0;
}

int remove_stale_temporaries(const fs::path& dir) {
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir.empty() ? fs::path(".") : dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const pid_t owner = temporary_owner(it->path().filename().string());
    if (owner == 0 || owner == ::getpid())
      continue;
    std::error_code status_ec;
    if (!fs::is_regular_file(it->symlink_status(status_ec)))
      continue;
    if (::kill(owner, 0) == 0 || errno != ESRCH)
      continue; // its process still runs (or belongs to someone else)
    std::error_code remove_ec;
    if (fs::remove(it->path(), remove_ec))
      ++removed;
  }
  return removed;
}

void write_file_atomically(const fs::path& path, const std::function<void(std::ostream&)>& write) {
  prepare_directory(path.parent_path());
  refuse_directory(path);
  Temporary tmp(path);
  tmp.fill(write);
  tmp.commit();
}

void write_output_set(const fs::path& dir, const std::vector<OutputFile>& files,
                      const std::vector<std::string>& set_names) {
  prepare_directory(dir);
  std::vector<std::unique_ptr<Temporary>> written;
  for (const OutputFile& file : files) {
    refuse_directory(dir / file.name);
    written.push_back(std::make_unique<Temporary>(dir / file.name));
    written.back()->fill(file.write);
  }
  // The first file (the summary) goes first and comes back last: its presence marks a set.
  std::vector<std::string> old = set_names;
  if (!files.empty())
    old.insert(old.begin(), files.front().name);
  for (const std::string& name : old) {
    std::error_code ec;
    fs::remove(dir / name, ec);
    if (ec && ec != std::errc::no_such_file_or_directory)
      throw Error("cannot replace " + (dir / name).string() + ": " + ec.message());
  }
  for (std::size_t i = written.size(); i-- > 0;)
    written[i]->commit();
}

void check_output_targets(const std::vector<fs::path>& paths) {
  for (const fs::path& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec))
      throw ConfigError("cannot write " + path.string() + ": it is a directory");
    if (path.has_parent_path()) {
      fs::create_directories(path.parent_path(), ec);
      if (ec)
        throw ConfigError("cannot create directory " + path.parent_path().string() + ": " + ec.message());
    }
    // A probe beside the target, created like the outputs: the directory must take new files.
    try {
      Temporary probe(path);
    } catch (const Error& e) {
      throw ConfigError(e.what());
    }
  }
}

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = &on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  for (const int sig : {SIGINT, SIGTERM, SIGHUP})
    ::sigaction(sig, &action, nullptr);
}

bool write_fully(int fd, const std::string& text) {
  return write_all(fd, text.data(), text.size());
}

} // namespace stepsim
