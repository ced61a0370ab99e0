# libblockps against real shards (each its own tgtd with grad, weights and status blockps LUs over libiscsi),
# and the posix transport's engines against files on the local disk. Included from CMakeLists.txt.
blockps_integration_test(blockps_client_tests test_client.cpp)
target_link_libraries(blockps_client_tests PRIVATE blockps nlohmann_json::nlohmann_json)

blockps_integration_test(blockps_client_posix_tests test_client_posix.cpp)
target_link_libraries(blockps_client_posix_tests PRIVATE blockps)

# Shards and workers as separate hosts (network namespaces, veth links to a bridge).
blockps_integration_test(blockps_client_netns_tests test_client_netns.cpp)
target_link_libraries(blockps_client_netns_tests PRIVATE blockps)

# Double buffering and adaptive pull (client/double_buffer.h) against 2 real shards: the swap never exposes a
# half-pulled buffer, the bubble converges under a controlled compute time, errors, the C API, Python.
blockps_integration_test(blockps_double_buffer_tests test_double_buffer.cpp)
# It also drives the C API and, where the Python package is built, runs python_binding_check.py.
target_link_libraries(blockps_double_buffer_tests PRIVATE blockps_test_cluster blockps::blockps)
if(TARGET blockps_python)
  add_dependencies(blockps_double_buffer_tests blockps_python)
  target_compile_definitions(blockps_double_buffer_tests PRIVATE BLOCKPS_PYTHON_DIR="${BLOCKPS_PYTHON_DIR}"
    BLOCKPS_PYTHON="${BLOCKPS_PYTHON}" BLOCKPS_PYTHON_CHECK="${CMAKE_CURRENT_SOURCE_DIR}/python_binding_check.py")
endif()

# A shard serves one job at a time, in the place it holds (client/job_and_place.h), through the C++ API, the C API and
# the CLI: a second job refused at open, a worker of no job refused in words, a restart of the same job, a takeover,
# release, a lapsed claim, the wrong kind, a cluster file in another order, a shard restarted from its checkpoint, the
# Python binding's keywords.
blockps_integration_test(blockps_job_claim_tests test_job_claim.cpp)
target_link_libraries(blockps_job_claim_tests PRIVATE blockps_test_cluster blockps::blockps nlohmann_json::nlohmann_json)
target_compile_definitions(blockps_job_claim_tests PRIVATE BLOCKPS_CLI_PATH="$<TARGET_FILE:blockps-cli>")
add_dependencies(blockps_job_claim_tests blockps-cli)
if(TARGET blockps_python)
  add_dependencies(blockps_job_claim_tests blockps_python)
  target_compile_definitions(blockps_job_claim_tests PRIVATE BLOCKPS_PYTHON_DIR="${BLOCKPS_PYTHON_DIR}"
    BLOCKPS_PYTHON="${BLOCKPS_PYTHON}")
endif()

# Workers that reconnect: a shard killed -9 and restarted mid-training, sessions the target drops, a shard that
# stays away (C++, C and Python errors).
blockps_integration_test(blockps_reconnect_tests test_reconnect.cpp)
target_link_libraries(blockps_reconnect_tests PRIVATE blockps_test_cluster blockps::blockps)
if(TARGET blockps_python)
  add_dependencies(blockps_reconnect_tests blockps_python)
  target_compile_definitions(blockps_reconnect_tests PRIVATE BLOCKPS_PYTHON_DIR="${BLOCKPS_PYTHON_DIR}"
    BLOCKPS_PYTHON="${BLOCKPS_PYTHON}")
endif()

# A test whose checks are torch scripts: the cluster fixture and, where the Python package is built, the
# interpreter, torchrun and the package's directory compiled in, with DEFINITIONS (NAME="path" of its scripts).
if(TARGET blockps_python)
  find_program(BLOCKPS_TORCHRUN torchrun PATHS /usr/bin NO_DEFAULT_PATH)
  if(NOT BLOCKPS_TORCHRUN)
    set(BLOCKPS_TORCHRUN /usr/bin/torchrun)  # python3-torch's; the test fails loudly where it is missing
  endif()
endif()
function(blockps_torch_test name source)
  blockps_integration_test(${name} ${source})
  target_link_libraries(${name} PRIVATE blockps_test_cluster)
  if(TARGET blockps_python)
    add_dependencies(${name} blockps_python)
    target_compile_definitions(${name} PRIVATE BLOCKPS_PYTHON_DIR="${BLOCKPS_PYTHON_DIR}"
      BLOCKPS_PYTHON="${BLOCKPS_PYTHON}" BLOCKPS_TORCHRUN="${BLOCKPS_TORCHRUN}" ${ARGN})
  endif()
endfunction()

# blockps.torch.DistributedOptimizer (torch_optimizer_check.py) against real shards: gradients pushed during
# backward bit for bit, one worker = torch.optim step for step, 2 torchrun ranks agree, a killed rank, a dead shard.
blockps_torch_test(blockps_torch_optimizer_tests test_torch_optimizer.cpp
  BLOCKPS_TORCH_CHECK="${CMAKE_CURRENT_SOURCE_DIR}/torch_optimizer_check.py")

# blockps.torch.averaging_hook (ddp_hook_check.py): DDP with the hook over averaging shards against DDP over gloo in
# the same torchrun ranks (2 and 3 ranks, four optimizers), the bf16 wire, a killed rank, a dead shard.
blockps_torch_test(blockps_ddp_hook_tests test_ddp_hook.cpp
  BLOCKPS_DDP_HOOK_CHECK="${CMAKE_CURRENT_SOURCE_DIR}/ddp_hook_check.py"
  BLOCKPS_DDP_EXAMPLE="${PROJECT_SOURCE_DIR}/client/examples/ddp_finetune.py")

# A shard serves one job at a time, in the place it holds, through the torch paths (job_check.py): two torchrun jobs
# on the same shards (the hook and DistributedOptimizer), a takeover, a cluster file in another order, the wrong kind.
blockps_torch_test(blockps_torch_jobs_tests test_torch_jobs.cpp
  BLOCKPS_JOB_CHECK="${CMAKE_CURRENT_SOURCE_DIR}/job_check.py")

# Hosts with several ranks (host_check.py): 2 hosts x 2 ranks whose ranks combine before the host's leader pushes;
# the hook against DDP over gloo, DistributedOptimizer with and without, a dead local rank, two torchrun agents.
blockps_torch_test(blockps_torch_hosts_tests test_torch_hosts.cpp
  BLOCKPS_HOST_CHECK="${CMAKE_CURRENT_SOURCE_DIR}/host_check.py")
