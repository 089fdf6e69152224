#pragma once
// Starting a command's mesh and compute backend: `train`, `eval` and `topology` start the same way.
#include <memory>
#include <string>

#include "backend.hpp"
#include "comm/mesh.hpp"

namespace trident {

// Starts the backend (binding this rank's GPU: the one place that happens), refuses ranks sharing a
// GPU unless runtime.comm = "mpi", gives the mesh's groups their tensor transport, and logs every
// rank's device on rank 0 (host, rank, local rank, GPU index, PCI bus id, UUID). Collective over the world.
std::unique_ptr<ComputeBackend> start_backend_on(ParallelMesh& mesh, const Config& cfg);

// The communicators of cfg.mesh over the world, under the watchdog (a rank that never gets there ends
// the job after runtime.collective_timeout_s). Collective.
std::unique_ptr<ParallelMesh> make_mesh(const Config& cfg);

// The checkpoint whose model `eval` and `generate` read: `given` (a file, or a directory's newest), else
// checkpoint.dir's newest; "" when there is neither and model.init_from names the weights. Throws
// trident::Error, saying what there is nothing to `verb`, when none of them is set.
std::string model_checkpoint(const std::string& given, const Config& cfg, const char* verb);

}  // namespace trident
