// An MPI job that goes wrong on purpose, for the failure tests:
//   killed [ALGORITHM] - rank 1 dies (SIGKILL) in the middle of a large all_reduce (default ring)
//   killed-before [ALGORITHM] - rank 1 dies just before making that call
//   killed-all-to-all [ALGORITHM] - rank 1 dies in the middle of the first of a few large all_to_alls
//             (default pairwise)
//   killed-all-to-all-v [ALGORITHM] - the same with all_to_all_v, uneven counts
//   absent  - rank 1 never makes the call (it sleeps), the others wait for it
//   healthy - everyone makes the call (the control: exits 0)
//   mismatch - rank 1 passes a different count to a shared-memory all_reduce
//   mismatch-direct - the same with the direct-read all_reduce
//   mismatch-reduce ALGORITHM - rank 1 asks for a max where the others sum (same bytes)
//   mismatch-all-to-all - rank 1 passes a different count to a one-host all_to_all
//   late    - rank 1 calls 3 s late; the waiting ranks must sleep, not spin
//             (exits 1 when a waiting rank used more than a quarter of a core)
// The timeout comes from STRATA_COMM_TIMEOUT.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_session.h"

using namespace strata;

namespace {

// Makes `calls` calls; the victim dies in the first once some chunks have
// moved, so the others are mid-call.
int make_calls(const comm::Communicator& world, bool victim, int calls, const std::function<comm::Handle()>& start) {
  for (int i = 0; i < calls; ++i) {
    comm::Handle call = start();
    if (victim) {
      for (int poll = 0; poll < 200; ++poll) call.test();
      raise(SIGKILL);
    }
    call.wait();
  }
  std::printf("rank %d finished\n", world.rank());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s killed|killed-before|killed-all-to-all|killed-all-to-all-v|absent|healthy|mismatch|mismatch-direct|mismatch-reduce|mismatch-all-to-all|late [ALGORITHM]\n", argv[0]);
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
  if (mode == "late") {
    if (world.rank() == 1) sleep(3);
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    auto start = std::chrono::steady_clock::now();
    world.all_reduce(in.data(), out.data(), 1024, DType::F32, comm::ReduceOp::Sum);
    getrusage(RUSAGE_SELF, &after);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
    double cpu = seconds(after.ru_utime) + seconds(after.ru_stime) - seconds(before.ru_utime) - seconds(before.ru_stime);
    std::printf("rank %d waited %.2f s using %.2f s of CPU\n", world.rank(), wall, cpu);
    return world.rank() != 1 && cpu > 0.25 * wall ? 1 : 0;
  }
  bool victim = world.rank() == 1 && mode != "healthy";
  if (victim && mode == "killed-before") raise(SIGKILL);
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
  if (mode == "mismatch-reduce") {
    const comm::Algorithm algorithm = comm::parse_algorithm(argv[2], "the probe's algorithm");
    const comm::ReduceOp mine = world.rank() == 1 ? comm::ReduceOp::Max : comm::ReduceOp::Sum;
    world.all_reduce(in.data(), out.data(), 1000, DType::F32, mine, algorithm);
    return 0;
  }
  if (mode == "mismatch-all-to-all") {
    const size_t block = world.rank() == 1 ? 5 : 10;
    world.all_to_all(in.data(), out.data(), block, DType::F32, comm::Algorithm::Pairwise);
    return 0;
  }
  if (mode == "killed-all-to-all") {
    const comm::Algorithm algorithm = argc == 3 ? comm::parse_algorithm(argv[2], "the probe's algorithm") : comm::Algorithm::Pairwise;
    const size_t block = count / static_cast<size_t>(world.size());
    // Several exchanges, as a training step makes: a survivor that received all
    // of the victim's first exchange (MPI may pull it alone) waits in the next.
    return make_calls(world, victim, 3, [&] { return world.all_to_all_async(in.data(), out.data(), block, DType::F32, algorithm); });
  }
  if (mode == "killed-all-to-all-v") {
    const comm::Algorithm algorithm = argc == 3 ? comm::parse_algorithm(argv[2], "the probe's algorithm") : comm::Algorithm::Pairwise;
    // Rank r sends peer j a share that grows with j; every rank receives the same from each sender.
    const size_t p = static_cast<size_t>(world.size()), unit = count / (p * (p + 1) / 2);
    std::vector<size_t> send_counts(p), recv_counts(p, unit * (static_cast<size_t>(world.rank()) + 1));
    for (size_t peer = 0; peer < p; ++peer) send_counts[peer] = unit * (peer + 1);
    std::vector<float> received(unit * p * p);
    return make_calls(world, victim, 3, [&] {
      return world.all_to_all_v_async(in.data(), send_counts, received.data(), recv_counts, DType::F32, algorithm);
    });
  }
  const comm::Algorithm algorithm = argc == 3 ? comm::parse_algorithm(argv[2], "the probe's algorithm") : comm::Algorithm::Ring;
  // Larger calls than its segment's slots hold go to the ring, so shm gets a small one.
  const size_t call_count = algorithm == comm::Algorithm::SharedMemory ? 1000 : count;
  return make_calls(world, victim, 1, [&] {
    return world.all_reduce_async(in.data(), out.data(), call_count, DType::F32, comm::ReduceOp::Sum, algorithm);
  });
}
