#pragma once
// Initialises MPI for the life of the object unless something already did,
// and finalises it only then. Communicators must be destroyed first.
namespace strata::comm {

class MpiSession {
 public:
  MpiSession();
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owns_ = false;
};

}  // namespace strata::comm
