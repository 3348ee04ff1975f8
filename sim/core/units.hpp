#pragma once
// Physical quantities as distinct types (ns-3's DataRate/Time are the model). Values are kept in
// SI base units (bytes, seconds, FLOPs) as double; convert with .value() only at a boundary
// (SimGrid, JSON output).

#include <compare>

namespace stepsim {

template <class Tag> class Quantity {
public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double v) : v_(v) {}
  [[nodiscard]] constexpr double value() const { return v_; }

  constexpr Quantity& operator+=(Quantity o) {
    v_ += o.v_;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity o) {
    v_ -= o.v_;
    return *this;
  }
  friend constexpr Quantity operator+(Quantity a, Quantity b) { return Quantity(a.v_ + b.v_); }
  friend constexpr Quantity operator-(Quantity a, Quantity b) { return Quantity(a.v_ - b.v_); }
  friend constexpr Quantity operator*(Quantity a, double k) { return Quantity(a.v_ * k); }
  friend constexpr Quantity operator*(double k, Quantity a) { return Quantity(a.v_ * k); }
  friend constexpr Quantity operator/(Quantity a, double k) { return Quantity(a.v_ / k); }
  /// Ratio of two quantities of the same kind (dimensionless).
  friend constexpr double operator/(Quantity a, Quantity b) { return a.v_ / b.v_; }
  friend constexpr auto operator<=>(Quantity a, Quantity b) = default;

private:
  double v_ = 0.0;
};

struct BytesTag;
struct SecondsTag;
struct FlopsTag;
struct BytesPerSecTag;
struct FlopsPerSecTag;

using Bytes = Quantity<BytesTag>;             ///< bytes
using Seconds = Quantity<SecondsTag>;         ///< seconds
using Flops = Quantity<FlopsTag>;             ///< floating-point operations (a multiply-add = 2)
using BytesPerSec = Quantity<BytesPerSecTag>; ///< bytes per second
using FlopsPerSec = Quantity<FlopsPerSecTag>; ///< FLOP per second

constexpr Seconds operator/(Bytes b, BytesPerSec r) {
  return Seconds(b.value() / r.value());
}
constexpr Seconds operator/(Flops f, FlopsPerSec r) {
  return Seconds(f.value() / r.value());
}
constexpr Bytes operator*(BytesPerSec r, Seconds t) {
  return Bytes(r.value() * t.value());
}
constexpr Flops operator*(FlopsPerSec r, Seconds t) {
  return Flops(r.value() * t.value());
}

namespace literals {
constexpr Bytes operator""_B(long double v) {
  return Bytes(static_cast<double>(v));
}
constexpr Bytes operator""_B(unsigned long long v) {
  return Bytes(static_cast<double>(v));
}
constexpr Seconds operator""_s(long double v) {
  return Seconds(static_cast<double>(v));
}
constexpr Seconds operator""_us(long double v) {
  return Seconds(static_cast<double>(v) * 1e-6);
}
constexpr Seconds operator""_us(unsigned long long v) {
  return Seconds(static_cast<double>(v) * 1e-6);
}
} // namespace literals

} // namespace stepsim
