# `cmake --install BUILD --prefix PREFIX`: the three programs into PREFIX/bin and the
# Python side (the shim worker_executor.py, the executor package wk_executor and the
# `worker` package functions import) into PREFIX/share/worker/python. An installed
# program looks there first (wk_config_installed_python_dir: its directory's
# ../share/worker/python), so the two paths below move together or not at all.
# Included from the top-level CMakeLists.txt after the targets exist.

install(TARGETS worker bundle_worker workerctl
  RUNTIME DESTINATION bin)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/
  DESTINATION share/worker/python
  PATTERN "__pycache__" EXCLUDE
  PATTERN "*.pyc" EXCLUDE
  PATTERN "worker_client" EXCLUDE) # the client library is pip's to install, not the executors'
