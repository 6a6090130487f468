// An MPI job that goes wrong on purpose, for the failure tests:
//   killed  - rank 1 dies (SIGKILL) in the middle of a large ring all_reduce
//   absent  - rank 1 never makes the call (it sleeps), the others wait for it
//   healthy - everyone makes the call (the control: exits 0)
//   mismatch - rank 1 passes a different count to a shared-memory all_reduce
//   mismatch-direct - the same with the direct-read all_reduce
// The timeout comes from STRATA_COMM_TIMEOUT.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_session.h"

using namespace strata;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s killed|absent|healthy|mismatch|mismatch-direct\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  comm::MpiSession mpi(&argc, &argv);
  comm::CommConfig config;
  config.topology_file = STRATA_COMM_TEST_DATA "/test_links.toml";
  config.chunk_bytes = 4096;
  config.apply_environment();
  comm::Communicator world = comm::Communicator::world(config);
  const size_t count = size_t{1} << 22;
  std::vector<float> in(count, 1.0f), out(count);
  bool victim = world.rank() == 1 && mode != "healthy";
  if (victim && mode == "absent") {
    sleep(600);
    return 0;
  }
  if (mode == "mismatch" || mode == "mismatch-direct") {
    // Small enough for the shared-memory slots (4 chunks of 4 KiB).
    size_t base = mode == "mismatch" ? 1000 : count;
    size_t mine = world.rank() == 1 ? base / 2 : base;
    auto algorithm = mode == "mismatch" ? comm::Algorithm::SharedMemory : comm::Algorithm::DirectRead;
    world.all_reduce(in.data(), out.data(), mine, DType::F32, comm::ReduceOp::Sum, algorithm);
    return 0;
  }
  comm::Handle call = world.all_reduce_async(in.data(), out.data(), count, DType::F32, comm::ReduceOp::Sum,
                                             comm::Algorithm::Ring);
  if (victim) {
    // Let some chunks move first, so the others are mid-collective.
    for (int i = 0; i < 200; ++i) call.test();
    raise(SIGKILL);
  }
  call.wait();
  std::printf("rank %d finished\n", world.rank());
  return 0;
}
