# Prometheus metrics (src/adapters/wk_metrics.h): a registry of counters, gauges and
# histograms with labels, rendered in text exposition format 0.0.4 and served on
# GET /metrics by libmicrohttpd (Debian libmicrohttpd-dev, scripts/deps.sh).

add_library(wk_metrics STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_metrics.c)
wk_headers(wk_metrics PUBLIC adapters/wk_metrics.h)
target_compile_options(wk_metrics PRIVATE ${WK_WARNINGS})
# libmicrohttpd's headers only: wk_metrics.c opens it when a server starts (lib/wk_dl.h)
target_include_directories(wk_metrics SYSTEM PRIVATE
  $<TARGET_PROPERTY:PkgConfig::MICROHTTPD,INTERFACE_INCLUDE_DIRECTORIES>)
target_link_libraries(wk_metrics PRIVATE wk_lib wk_netaddr Threads::Threads m)
