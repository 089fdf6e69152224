#!/usr/bin/env bash
# Installs the Debian 12 packages that trident's build, tests and reference checks need.
# Idempotent: does nothing (and needs no root) when everything is already present.
set -euo pipefail

packages=(
  cmake make g++ pkg-config
  mpich libmpich-dev libhdf5-mpich-dev hdf5-tools libopenblas-dev
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev
  libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy python3-h5py
)
# Slurm test cluster (ctest label "slurm"): only when asked, it is not needed to build.
if [[ "${TRIDENT_WITH_SLURM:-0}" == 1 ]]; then
  packages+=(slurmctld slurmd slurm-client munge)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
# Serial HDF5's h5cc would shadow h5pcc in CMake's FindHDF5: refuse to build against it.
if [[ -x /usr/bin/h5cc ]] && dpkg-query -W -f='${Status}' libhdf5-dev 2>/dev/null | grep -q "install ok"; then
  echo "install-deps: warning: libhdf5-dev (serial HDF5) is installed; CMake is pointed at h5pcc explicitly" >&2
fi
