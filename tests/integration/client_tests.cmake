# libblockps against real shards (each its own tgtd with grad, weights and status blockps LUs over libiscsi),
# and the posix transport's engines against files on the local disk. Included from CMakeLists.txt.
blockps_integration_test(blockps_client_tests test_client.cpp)
target_link_libraries(blockps_client_tests PRIVATE blockps)

blockps_integration_test(blockps_client_posix_tests test_client_posix.cpp)
target_link_libraries(blockps_client_posix_tests PRIVATE blockps)

# Shards and workers as separate hosts (network namespaces, veth links to a bridge).
blockps_integration_test(blockps_client_netns_tests test_client_netns.cpp)
target_link_libraries(blockps_client_netns_tests PRIVATE blockps)

# Double buffering and adaptive pull (client/double_buffer.h) against 2 real shards: the swap never exposes a
# half-pulled buffer, the bubble converges under a controlled compute time, errors.
blockps_integration_test(blockps_double_buffer_tests test_double_buffer.cpp)
target_link_libraries(blockps_double_buffer_tests PRIVATE blockps_test_cluster)
