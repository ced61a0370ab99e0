"""blockps/jobs.py's default job name (docs/OPTIONS.md, "Jobs and places"): each launcher's environment as torchrun,
mp.spawn or a plain process sets it, and the name every rank and every restart of one job must share. Which source
wins (job=, [client] job, BLOCKPS_JOB, this default) is libblockps's choice: tests/unit/client/test_tenancy.cpp."""
import os
import socket

import pytest

from blockps import jobs

# What each launcher puts in a rank's environment (torch 1.13's local_elastic_agent.py for torchrun).
_LAUNCHER_KEYS = ("BLOCKPS_JOB", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "GROUP_WORLD_SIZE",
                  "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def env(monkeypatch):
    for key in _LAUNCHER_KEYS:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def torchrun(env, run_id="none", hosts=1, static=False, addr="10.0.0.1", port="29500"):
    env.setenv("TORCHELASTIC_RUN_ID", run_id)
    env.setenv("TORCHELASTIC_USE_AGENT_STORE", str(static))
    env.setenv("GROUP_WORLD_SIZE", str(hosts))
    env.setenv("WORLD_SIZE", str(hosts * 2))
    env.setenv("MASTER_ADDR", addr)
    env.setenv("MASTER_PORT", port)


def test_the_default_is_the_launchers_whatever_blockps_job_says(env):
    torchrun(env, run_id="resnet-a", hosts=4)
    env.setenv("BLOCKPS_JOB", "mine")  # the library's to weigh, before this default
    assert jobs.launcher_job_name() == ("torchrun:resnet-a", None)


def test_a_torchrun_run_id_names_the_job_on_every_host(env):
    torchrun(env, run_id="resnet-a", hosts=4)
    assert jobs.launcher_job_name() == ("torchrun:resnet-a", None)


def test_one_host_torchrun_without_an_id_is_its_agent_which_outlives_restarts(env):
    torchrun(env, hosts=1)
    assert jobs.launcher_job_name() == (f"torchrun:{socket.gethostname()}:{os.getppid()}", None)


def test_a_static_rendezvous_over_hosts_is_its_address_and_port(env):
    torchrun(env, hosts=2, static=True, addr="gpu01", port="29400")
    assert jobs.launcher_job_name() == ("dist:gpu01:29400", None)


def test_a_c10d_rendezvous_over_hosts_without_an_id_has_no_name(env):
    torchrun(env, hosts=2, static=False, port="41234")  # c10d: a new MASTER_PORT per attempt
    name, why = jobs.launcher_job_name()
    assert name is None and "--rdzv_id NAME" in why


def test_a_process_group_without_torchrun_is_its_rendezvous(env):
    env.setenv("WORLD_SIZE", "4")
    env.setenv("MASTER_ADDR", "127.0.0.1")
    env.setenv("MASTER_PORT", "29501")
    assert jobs.launcher_job_name() == ("dist:127.0.0.1:29501", None)


def test_a_single_process_is_itself(env):
    assert jobs.launcher_job_name() == (f"process:{socket.gethostname()}:{os.getpid()}", None)


def test_the_reason_names_the_flag_as_the_installed_torchrun_spells_it():
    assert "--rdzv_id NAME" in jobs.NO_SHARED_NAME
    run = pytest.importorskip("torch.distributed.run")
    assert "--rdzv_id" in run.get_args_parser().format_help(), "this torchrun does not know --rdzv_id"


def test_a_shard_of_the_wrong_kind_is_a_mismatch_error_which_is_a_value_error():
    import blockps
    assert issubclass(blockps.MismatchError, blockps.Error)
    assert issubclass(blockps.MismatchError, ValueError)
    assert not issubclass(blockps.ShardUnreachableError, ValueError)


def test_an_argument_refused_before_anything_is_sent_is_a_value_error():
    import blockps
    assert issubclass(blockps.InvalidArgumentError, blockps.Error)
    assert issubclass(blockps.InvalidArgumentError, ValueError)
