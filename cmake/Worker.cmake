# The worker daemon: the executor pool adapter, app (orchestrator, subscriptions, wiring),
# plugins (builders), and cmd/worker. Needs wk_core, wk_proto, wk_adapters_frame,
# wk_grpc_server and wk_code_store.

add_library(wk_plugins STATIC src/plugins/wk_builders.c)
wk_headers(wk_plugins PUBLIC plugins/wk_builders.h)
target_compile_options(wk_plugins PRIVATE ${WK_WARNINGS})
target_link_libraries(wk_plugins PRIVATE wk_lib PkgConfig::JANSSON)

# The executor pool adapter (spawns and talks to the Python executors over libuv).
add_library(wk_executor_pool STATIC
  src/adapters/wk_executor_pool.c
  src/adapters/wk_executor_output.c
  src/adapters/wk_reaper.c
  src/adapters/wk_cgroup.c
  src/adapters/wk_meminfo.c)
wk_headers(wk_executor_pool PUBLIC adapters/wk_executor_pool.h adapters/wk_exec_adapter.h
  adapters/wk_executor_output.h adapters/wk_reaper.h adapters/wk_cgroup.h adapters/wk_meminfo.h)
target_compile_definitions(wk_executor_pool PRIVATE _GNU_SOURCE)
target_compile_options(wk_executor_pool PRIVATE ${WK_WARNINGS})
target_link_libraries(wk_executor_pool PUBLIC wk_adapters_frame PkgConfig::LIBUV PRIVATE wk_lib wk_log)

# glibc's heap kept warm under load (mallopt): the worker and bench/wk_loadgen.
add_library(wk_malloc_policy STATIC src/adapters/wk_malloc_policy.c)
wk_headers(wk_malloc_policy PUBLIC adapters/wk_malloc_policy.h)
target_compile_options(wk_malloc_policy PRIVATE ${WK_WARNINGS})

# sd_notify to systemd (READY, STOPPING, WATCHDOG): the protocol itself, no libsystemd.
add_library(wk_sdnotify STATIC src/adapters/wk_sdnotify.c)
wk_headers(wk_sdnotify PUBLIC adapters/wk_sdnotify.h)
target_compile_options(wk_sdnotify PRIVATE ${WK_WARNINGS})
target_link_libraries(wk_sdnotify PRIVATE wk_lib wk_log PkgConfig::JANSSON)

# The status page, embedded in the binary (served on metrics_addr, src/app/wk_status.h).
add_custom_command(
  OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/wk_status_page.c
  COMMAND ${CMAKE_COMMAND} -DIN=${PROJECT_SOURCE_DIR}/src/app/wk_status_page.html
          -DOUT=${CMAKE_CURRENT_BINARY_DIR}/wk_status_page.c -DNAME=wk_status_page_html
          -P ${PROJECT_SOURCE_DIR}/cmake/EmbedFile.cmake
  DEPENDS ${PROJECT_SOURCE_DIR}/src/app/wk_status_page.html
          ${PROJECT_SOURCE_DIR}/cmake/EmbedFile.cmake
  COMMENT "Embedding the status page"
  VERBATIM)

add_library(wk_app STATIC
  src/app/wk_fs.c
  src/app/wk_rundir.c
  src/app/wk_wire.c
  src/app/wk_task_runtime.c
  src/app/wk_task_code.c
  src/app/wk_code_cache.c
  src/app/wk_output_spool.c
  src/app/wk_code_prune.c
  src/app/wk_deploy.c
  src/app/wk_deploy_acl.c
  src/app/wk_code_registry.c
  src/app/wk_calls.c
  src/app/wk_subscriptions.c
  src/app/wk_orchestrator.c
  src/app/wk_orch_rpc.c
  src/app/wk_orch_progress.c
  src/app/wk_orch_tasks.c
  src/app/wk_task_book.c
  src/app/wk_phase_jobs.c
  src/app/wk_phase_sem.c
  src/app/wk_io_scope.c
  src/app/wk_usage_log.c
  src/app/wk_config_table.c
  src/app/wk_config_value.c
  src/app/wk_config_names.c
  src/app/wk_config_problems.c
  src/app/wk_config_yaml.c
  src/app/wk_config_env.c
  src/app/wk_config_cli.c
  src/app/wk_config_load.c
  src/app/wk_config_validate.c
  src/app/wk_config_print.c
  src/app/wk_app.c
  src/app/wk_app_metrics.c
  src/app/wk_status.c
  ${CMAKE_CURRENT_BINARY_DIR}/wk_status_page.c
  src/app/wk_audit.c
  src/app/wk_executor_env.c
  src/app/wk_executor_user.c
  src/app/wk_admission.c
  src/app/wk_profile.c
  src/app/wk_main.c)
wk_headers(wk_app PUBLIC app/*.h)
target_compile_definitions(wk_app PRIVATE _GNU_SOURCE WK_VERSION="${PROJECT_VERSION}")
# The build tree's Python files: the default of executor_script and python_path in the
# settings table (an installed program finds PREFIX/share/worker/python instead).
set_source_files_properties(src/app/wk_config_table.c PROPERTIES
  COMPILE_DEFINITIONS WK_PYTHON_DIR="${PROJECT_SOURCE_DIR}/python")
target_compile_options(wk_app PRIVATE ${WK_WARNINGS})
# PUBLIC: what the app's headers include; PRIVATE: what only its .c files use.
target_link_libraries(wk_app
  PUBLIC
    wk_core
    wk_proto
    wk_executor_pool
    wk_grpc_server
    wk_etcd_publisher
    wk_shadow
    wk_metrics
    wk_plugins
    wk_writers
    PkgConfig::LIBUV
    PkgConfig::GRPC
  PRIVATE
    wk_malloc_policy
    wk_code_store
    wk_pem
    wk_grpc_client
    wk_journal
    wk_log
    wk_sdnotify
    wk_absl_locks
    wk_version
    PkgConfig::JANSSON
    PkgConfig::YAML
    Threads::Threads)

add_executable(worker
  cmd/worker/main.c
  cmd/worker/profile.c)
target_include_directories(worker PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_options(worker PRIVATE ${WK_WARNINGS})
target_compile_definitions(worker PRIVATE _GNU_SOURCE)
target_link_libraries(worker PRIVATE wk_app)

add_executable(bundle_worker
  cmd/bundle_worker/main.c
  cmd/bundle_worker/profile.c)
target_include_directories(bundle_worker PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_options(bundle_worker PRIVATE ${WK_WARNINGS})
target_compile_definitions(bundle_worker PRIVATE _GNU_SOURCE)
target_link_libraries(bundle_worker PRIVATE wk_app)
