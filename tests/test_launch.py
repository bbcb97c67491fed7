"""Where a real-backend process stands: each launcher's variables, and the bootstrap root."""
from __future__ import annotations

import pytest

from nicksim.errors import UsageError
from nicksim.params import read_params
from nicksim.realhw.launch import RankEnv, rank_env, root_address


@pytest.mark.parametrize("environ, expected", [
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3"}, RankEnv(3, 8, 3, "torchrun")),
    ({"OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
     RankEnv(9, 16, 1, "openmpi")),
    ({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0"}, RankEnv(2, 4, 0, "pmi")),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1"}, RankEnv(5, 6, 1, "slurm")),
    # mpirun inside a Slurm allocation: Open MPI's own variables win over the allocation's.
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
     RankEnv(1, 2, 1, "openmpi")),
    ({"PMI_RANK": "1", "PMI_SIZE": "2"}, RankEnv(1, 2, 1, "pmi")),  # no local rank: one host
    ({"HOME": "/root"}, None),
])
def test_each_launchers_variables(environ, expected):
    assert rank_env(environ) == expected


@pytest.mark.parametrize("environ, named", [
    ({"RANK": "4", "WORLD_SIZE": "4"}, "RANK=4 with WORLD_SIZE=4"),
    ({"RANK": "one", "WORLD_SIZE": "4"}, "RANK='one' is not a whole number"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "0"}, "SLURM_PROCID=0 with SLURM_NTASKS=0"),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "2"},
     "OMPI_COMM_WORLD_LOCAL_RANK=2 is above"),
])
def test_bad_launcher_variables_are_named(environ, named):
    with pytest.raises(UsageError, match=named):
        rank_env(environ)


def test_the_root_is_nicksim_comm_id_else_master_addr_and_port():
    both = {"NICKSIM_COMM_ID": "10.1.2.3:29501", "MASTER_ADDR": "node7", "MASTER_PORT": "29500"}
    assert root_address(read_params(both), both) == ("10.1.2.3", 29501)
    torchrun = {"MASTER_ADDR": "node7", "MASTER_PORT": "29500"}
    assert root_address(read_params(torchrun), torchrun) == ("node7", 29500)
    v6 = {"NICKSIM_COMM_ID": "[fe80::1]:4000"}
    assert root_address(read_params(v6), v6) == ("fe80::1", 4000)
    assert root_address(read_params({}), {}) is None


@pytest.mark.parametrize("environ, where", [
    ({"NICKSIM_COMM_ID": "node7"}, "NICKSIM_COMM_ID"),
    ({"NICKSIM_COMM_ID": "node7:99999"}, "NICKSIM_COMM_ID"),
    ({"MASTER_ADDR": "node7"}, "MASTER_PORT is not set"),
])
def test_a_malformed_root_is_named(environ, where):
    with pytest.raises(UsageError, match=where):
        root_address(read_params(environ), environ)
