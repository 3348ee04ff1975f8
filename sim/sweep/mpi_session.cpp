#include "sweep/mpi_session.hpp"

#include "core/error.hpp"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#ifdef STEPSIM_HAVE_MPI
#include <mpi.h>
#endif

namespace stepsim::sweep {

bool mpi_built() {
#ifdef STEPSIM_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::optional<int> mpi_launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      const int n = std::atoi(v);
      if (n > 0) {
        return n;
      }
    }
  }
  return std::nullopt;
}

#ifdef STEPSIM_HAVE_MPI

MpiSession::MpiSession() {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) {
    throw Error("MPI_Init failed");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm local;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local) ==
      MPI_SUCCESS) {
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
  }
}

MpiSession::~MpiSession() {
  MPI_Finalize();
}

void MpiSession::barrier() const {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  int done = 0;
  while (true) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done != 0) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

#else

MpiSession::MpiSession() {
  throw Error("this stepsim was built without MPI (install libopenmpi-dev and reconfigure)");
}

MpiSession::~MpiSession() = default;

void MpiSession::barrier() const {}

void MpiSession::abort(int code) const {
  std::_Exit(code);
}

#endif

} // namespace stepsim::sweep
