#pragma once
// SimGrid allows one simulation per process (SIMGRID_NOTES trap 4). A test that compares two
// simulations runs each one in a child with run_in_child() (process/process.hpp): the child
// computes a vector of doubles and sends it back as its message; the parent waits for it and
// checks how the child ended. The parent itself must not have started SimGrid.

#include "process/process.hpp"

#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace stepsim::test {

struct ChildResult {
  bool ok = false;            ///< the child exited 0 and sent its values
  std::string error;          ///< why not (exception text, signal, exit code), then its output
  std::vector<double> values; ///< what the child's function returned
};

/// Runs `fn` in a child process and returns what it produced.
inline ChildResult run_in_child(const std::function<std::vector<double>()>& fn) {
  ChildResult result;
  process::Outcome child;
  try {
    child = process::run(process::Job{.body =
                                          [&fn] {
                                            process::Message values = process::Message::array();
                                            for (const double v : fn())
                                              values.push_back(process::number(v));
                                            return values;
                                          },
                                      .argv = {}});
  } catch (const std::exception& e) { // the child could not be started
    result.error = e.what();
    return result;
  }
  if (child.signal != 0)
    result.error = "child killed by signal " + std::to_string(child.signal);
  else if (!child.exception.empty())
    result.error = "child threw: " + child.exception;
  else if (child.exit_code != 0)
    result.error = "child exited with code " + std::to_string(child.exit_code);
  else if (!child.message || !child.message->is_array())
    result.error = "child sent a malformed reply";
  if (!result.error.empty()) {
    if (!child.output.empty())
      result.error += "; its output:\n" + child.output;
    return result;
  }
  for (const process::Message& v : *child.message)
    result.values.push_back(process::number_of(v));
  result.ok = true;
  return result;
}

} // namespace stepsim::test
