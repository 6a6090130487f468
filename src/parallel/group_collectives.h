#pragma once
// The device mesh's groups as the groups of the collective ops
// (ops/collective_group.h), under their dimensions' names: graph nodes such as
// all_reduce{group: "tp"} then run over the comm layer.
#include "parallel/device_mesh.h"

namespace strata {

// Registers this rank's group of every dimension (replacing earlier ones).
void register_mesh_groups(DeviceMesh& mesh);
// Removes them: the names are groups of one rank again.
void unregister_mesh_groups();

// Registers a mesh's groups for its lifetime (they must go before the comm layer shuts down).
class MeshGroupsRegistration {
 public:
  explicit MeshGroupsRegistration(DeviceMesh& mesh) { register_mesh_groups(mesh); }
  ~MeshGroupsRegistration() { unregister_mesh_groups(); }
  MeshGroupsRegistration(const MeshGroupsRegistration&) = delete;
  MeshGroupsRegistration& operator=(const MeshGroupsRegistration&) = delete;
};

}  // namespace strata
