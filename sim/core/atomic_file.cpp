#include "core/atomic_file.hpp"

#include "core/error.hpp"

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
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw Error("cannot open " + tmp.string() + " for writing");
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
    fs::remove(tmp, ec);
    throw Error("cannot move " + tmp.string() + " to " + path.string());
  }
}

} // namespace stepsim
