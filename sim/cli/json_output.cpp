#include "cli/json_output.hpp"

#include "core/atomic_file.hpp"
#include "planner/planner.hpp"

#include <filesystem>

namespace stepsim::cli {

void check_json_target(const JsonTargets& t) {
  if (!t.out_dir.empty())
    check_output_targets({std::filesystem::path(t.out_dir) / t.file_name});
}

void emit_json(std::ostream& out, const JsonTargets& t, const nlohmann::ordered_json& doc) {
  if (t.to_stdout)
    out << doc.dump(2) << '\n';
  if (!t.out_dir.empty())
    write_file_atomically(std::filesystem::path(t.out_dir) / t.file_name,
                          [&](std::ostream& o) { o << doc.dump(2) << '\n'; });
}

nlohmann::ordered_json document_head(const char* schema, const ClusterSpec& cluster,
                                     const std::string& workload) {
  nlohmann::ordered_json j;
  j["schema"] = schema;
  j["cluster"] = cluster.name;
  if (!workload.empty())
    j["workload"] = workload;
  j["num_gpus"] = cluster.num_gpus();
  return j;
}

nlohmann::ordered_json layout_json(const WorkloadSpec& w) {
  return nlohmann::ordered_json{{"tp", w.parallel.tp},
                                {"pp", w.parallel.pp},
                                {"dp", w.parallel.dp},
                                {"cp", w.parallel.cp},
                                {"ep", w.parallel.ep},
                                {"vp", w.parallel.vp},
                                {"micro_batch", w.batch.micro_batch},
                                {"micro_batches", w.micro_batches()},
                                {"zero_stage", w.parallel.zero_stage},
                                {"recompute", planner::recompute_name(w.training)},
                                {"recompute_layers", w.training.recompute_layers},
                                {"sp", w.parallel.sp},
                                {"schedule", planner::schedule_name(w.parallel.schedule)},
                                {"offload_layers", w.training.offload_layers},
                                {"fp8_params", w.training.fp8_params}};
}

} // namespace stepsim::cli
