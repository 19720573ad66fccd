#!/usr/bin/env bash
# Installs what `make bench` compares tide with, when missing: Slurm and
# munge (Debian's slurm-wlm and munge) and PostgreSQL for the second store.
# Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

need=()
have slurmctld && have slurmd && have sbatch || need+=(slurm-wlm)
have munged || need+=(munge)
if ! have initdb && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
if [ ${#need[@]} -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "bench: install ${need[*]} (Debian packages) as root, then run make bench again" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${need[@]}"
fi
# initdb refuses to run as root; the benchmark runs PostgreSQL as this user.
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --no-create-home postgres
fi
