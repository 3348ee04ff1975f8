// The `stepsim` command: subcommands, options, exit codes (0 ok, 1 simulation error,
// 2 usage/config error). The only place that turns exceptions into exit codes.

#include "cli/commands.hpp"
#include "core/error.hpp"

#include <iostream>

int main(int argc, char** argv) {
  try {
    return stepsim::cli::dispatch(argc, argv, std::cout, std::cerr);
  } catch (const stepsim::ConfigError& e) {
    std::cerr << "stepsim: error: " << e.what() << '\n';
    return 2;
  } catch (const stepsim::ModelError& e) {
    std::cerr << "stepsim: error: " << e.what() << '\n';
    return 2;
  } catch (const stepsim::SimulationError& e) {
    std::cerr << "stepsim: simulation error: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "stepsim: error: " << e.what() << '\n';
    return 1;
  }
}
