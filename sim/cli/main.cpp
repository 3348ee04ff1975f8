// The `stepsim` command: subcommands, options, exit codes (0 ok, 1 simulation error,
// 2 usage/config error). The only place that turns exceptions into exit codes.

#include "cli/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <new>
#include <string>

namespace {

/// Reports an error and ends the process without running static destructors: an error thrown
/// out of a simulation leaves SimGrid's engine with live activities, and its own teardown would
/// then crash. Every output file is complete or absent by now (core/atomic_file.hpp).
[[noreturn]] void fail(const char* kind, const char* what, int code) {
  std::cout.flush();
  std::cerr << "stepsim: " << kind << ": " << stepsim::printable_message(what) << '\n';
  std::cerr.flush();
  std::_Exit(code);
}

} // namespace

int main(int argc, char** argv) {
  stepsim::install_interrupt_handlers();
  try {
    return stepsim::cli::dispatch(argc, argv, std::cout, std::cerr);
  } catch (const stepsim::ConfigError& e) {
    fail("error", e.what(), 2);
  } catch (const stepsim::ModelError& e) {
    fail("error", e.what(), 2);
  } catch (const stepsim::SimulationError& e) {
    fail("simulation error", e.what(), 1);
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the system refuses (a name too long, no permission): a usage problem, named.
    const std::string path = e.path1().empty() ? std::string() : " '" + e.path1().string() + "'";
    fail("error", ("cannot access" + path + ": " + e.code().message()).c_str(), 2);
  } catch (const std::bad_alloc&) {
    fail("error", "out of memory (the configuration is too large for this machine)", 1);
  } catch (const std::exception& e) {
    fail("error", e.what(), 1);
  }
}
