// consumer CLUSTER WORKLOAD [PATH=VALUE...]: simulates one step through the installed public API
// and prints summary.json's text, then the memory ledger's (docs/library.md).

#include <api/stepsim.hpp>
#include <core/error.hpp>

#include <iostream>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: consumer CLUSTER WORKLOAD [PATH=VALUE...]\n";
    return 2;
  }
  try {
    stepsim::api::Inputs inputs{.cluster_file = argv[1], .workload_file = argv[2], .set = {}};
    for (int i = 3; i < argc; ++i)
      inputs.set.emplace_back(argv[i]);
    const stepsim::api::Specs specs = stepsim::api::load(inputs);
    std::cout << stepsim::api::summary_json(stepsim::api::simulate_step(specs));
    std::cout << stepsim::api::memory_json(specs);
  } catch (const stepsim::Error& e) {
    std::cerr << "consumer: " << e.what() << '\n';
    return 2;
  }
  return 0;
}
