#pragma once
// A std::ostream that gzip-compresses what is written to it into another stream (zlib, gzip
// header without a file name or time stamp, so the same text gives the same bytes). Perfetto and
// chrome://tracing open `trace.json.gz` as they open `trace.json`.

#include <memory>
#include <ostream>

namespace stepsim::trace {

class GzipOstream : public std::ostream {
public:
  /// Compresses into `sink`, at zlib's level `level` (1 fastest .. 9 smallest).
  explicit GzipOstream(std::ostream& sink, int level = 6);
  ~GzipOstream() override;
  GzipOstream(const GzipOstream&) = delete;
  GzipOstream& operator=(const GzipOstream&) = delete;

  /// Flushes the compressor and writes the gzip trailer. Throws stepsim::Error when zlib or the
  /// sink fails. Call once, after the last write; the destructor does not.
  void finish();

private:
  class Buffer;
  std::unique_ptr<Buffer> buffer_;
};

} // namespace stepsim::trace
