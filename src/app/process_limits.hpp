#pragma once
// Process limits checked before MPI starts, whose failures MPI would report only as a raw error stack.

namespace trident {

// Open files: the soft limit is raised to the hard one (MPI needs descriptors for its shared memory,
// sockets and the rank's peers; HDF5 and the data files need more). Returns false, after one message
// on stderr, when the hard limit is below what a run needs.
bool raise_open_file_limit();

}  // namespace trident
