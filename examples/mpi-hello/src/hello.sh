#!/bin/sh
# MPI hello world: mpirun (started by tide on node 0) runs this once per
# rank and tells each its place through Open MPI's variables.
echo "hello from MPI rank ${OMPI_COMM_WORLD_RANK:-?} of ${OMPI_COMM_WORLD_SIZE:-?}" \
	"(local rank ${OMPI_COMM_WORLD_LOCAL_RANK:-?}) on $(hostname), job ${AZUREML_RUN_ID:-?}"
