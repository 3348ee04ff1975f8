#include "trace/gzip_stream.hpp"

#include "core/error.hpp"

#include <zlib.h>

#include <array>
#include <streambuf>

namespace stepsim::trace {

class GzipOstream::Buffer : public std::streambuf {
public:
  Buffer(std::ostream& sink, int level) : sink_(sink) {
    // 16 + MAX_WBITS: a gzip header and trailer around the deflate stream.
    if (deflateInit2(&z_, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      throw Error("cannot start gzip compression");
    setp(in_.data(), in_.data() + in_.size());
  }
  ~Buffer() override { deflateEnd(&z_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void finish() {
    deflate_pending(Z_FINISH);
    sink_.flush();
    if (!sink_)
      throw Error("cannot write the compressed trace");
  }

protected:
  int_type overflow(int_type c) override {
    deflate_pending(Z_NO_FLUSH);
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return 0; }

private:
  /// Compresses what is buffered (and with Z_FINISH ends the stream), writing the output.
  void deflate_pending(int flush) {
    z_.next_in = reinterpret_cast<Bytef*>(pbase());
    z_.avail_in = static_cast<uInt>(pptr() - pbase());
    int rc = Z_OK;
    do {
      z_.next_out = reinterpret_cast<Bytef*>(out_.data());
      z_.avail_out = static_cast<uInt>(out_.size());
      rc = deflate(&z_, flush);
      if (rc == Z_STREAM_ERROR)
        throw Error("gzip compression failed");
      sink_.write(out_.data(), static_cast<std::streamsize>(out_.size() - z_.avail_out));
    } while (z_.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
    setp(in_.data(), in_.data() + in_.size());
  }

  std::ostream& sink_;
  z_stream z_{};
  std::array<char, 1 << 16> in_{};
  std::array<char, 1 << 16> out_{};
};

GzipOstream::GzipOstream(std::ostream& sink, int level)
    : std::ostream(nullptr), buffer_(std::make_unique<Buffer>(sink, level)) {
  rdbuf(buffer_.get());
}

GzipOstream::~GzipOstream() = default;

void GzipOstream::finish() {
  flush();
  buffer_->finish();
}

} // namespace stepsim::trace
