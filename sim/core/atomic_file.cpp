#include "core/atomic_file.hpp"

#include "core/error.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>
#include <unistd.h>

namespace stepsim {

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.has_parent_path()) {
    fs::create_directories(path.parent_path(), ec);
    if (ec)
      throw Error("cannot create directory " + path.parent_path().string() + ": " + ec.message());
  }
  if (fs::is_directory(path, ec))
    throw Error("cannot write " + path.string() + ": it is a directory");
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw Error("cannot write " + path.string() + ": " +
                  (errno != 0 ? std::strerror(errno) : "open failed") + " (opening " +
                  tmp.filename().string() + ")");
    write(out);
    out.flush();
    if (!out) {
      out.close();
      fs::remove(tmp, ec);
      throw Error("failed writing " + path.string());
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    throw Error("cannot write " + path.string() + ": " + why + " (moving " + tmp.filename().string() +
                " into place)");
  }
}

void check_output_targets(const std::vector<std::filesystem::path>& paths) {
  namespace fs = std::filesystem;
  for (const fs::path& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec))
      throw ConfigError("cannot write " + path.string() + ": it is a directory");
    if (path.has_parent_path()) {
      fs::create_directories(path.parent_path(), ec);
      if (ec)
        throw ConfigError("cannot create directory " + path.parent_path().string() + ": " + ec.message());
    }
    // A probe beside the target: the directory must take new files (the outputs land by rename).
    fs::path probe = path;
    probe += ".probe." + std::to_string(::getpid());
    errno = 0;
    {
      std::ofstream out(probe, std::ios::binary | std::ios::trunc);
      if (!out)
        throw ConfigError("cannot write " + path.string() + ": " +
                          (errno != 0 ? std::strerror(errno) : "open failed"));
    }
    fs::remove(probe, ec);
  }
}

bool write_fully(int fd, const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) {
        continue;
      }
      return false;
    }
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  return true;
}

} // namespace stepsim
