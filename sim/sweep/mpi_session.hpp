#pragma once
// Optional MPI: with `mpirun -np K stepsim sweep ...`, rank r runs shard r/K and rank 0 merges
// the shards after a barrier. Built only when CMake finds MPI (STEPSIM_HAVE_MPI); otherwise
// mpi_built() is false and MpiSession cannot be created.

#include <optional>

namespace stepsim::sweep {

/// Whether this binary was built with MPI.
bool mpi_built();

/// The world size an MPI launcher announced in the environment (OMPI_COMM_WORLD_SIZE,
/// PMI_SIZE or MV2_COMM_WORLD_SIZE), or nullopt when the process was not started by one.
std::optional<int> mpi_launcher_size();

/// MPI_Init on construction, MPI_Finalize on destruction. At most one per process.
class MpiSession {
public:
  /// Throws Error when built without MPI or initialisation fails.
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  /// Ranks sharing this node (MPI_COMM_TYPE_SHARED), at least 1.
  [[nodiscard]] int local_size() const { return local_size_; }

  /// Waits until every rank arrives. Polls a non-blocking barrier with short sleeps, so a rank
  /// that finished early does not spin a CPU that the other ranks' simulations need.
  void barrier() const;

  /// MPI_Abort on the world with `code` (ends every rank).
  [[noreturn]] void abort(int code) const;

private:
  int rank_ = 0;
  int size_ = 1;
  int local_size_ = 1;
};

} // namespace stepsim::sweep
