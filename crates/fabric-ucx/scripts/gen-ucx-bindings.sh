#!/usr/bin/env bash
# Regenerates src/sys.rs, the raw UCX bindings, from the installed UCX headers (written
# against UCX 1.13.1: `apt-get install -y libucx-dev bindgen libclang-dev`). Only the
# ucp_*/ucs_* functions, types and constants the safe layer uses are let through, so a
# regeneration against another UCX shows exactly what changed for us.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v bindgen >/dev/null 2>&1; then
  echo "bindgen not found: apt-get install -y bindgen libclang-dev (or cargo install bindgen-cli)" >&2
  exit 1
fi
cflags=$(pkg-config --cflags ucx)
version=$(pkg-config --modversion ucx)
functions='ucp_(config_read|config_modify|config_release|init_version|cleanup|get_version_string|worker_create|worker_destroy|worker_progress|worker_get_address|worker_release_address|worker_set_am_recv_handler|worker_flush_nbx|ep_create|ep_close_nbx|ep_flush_nbx|mem_map|mem_unmap|mem_query|rkey_ptr|rkey_pack|rkey_buffer_release|ep_rkey_unpack|rkey_destroy|get_nbx|put_nbx|atomic_op_nbx|am_send_nbx|am_recv_data_nbx|am_data_release|request_check_status|request_free)|ucs_status_string'
types='ucs_status_t|ucs_status_ptr_t|ucs_thread_mode_t|ucp_(params|params_t|feature|worker_params|worker_params_t|worker_params_field|ep_params|ep_params_t|ep_params_field|err_handling_mode_t|err_handler|err_handler_t|err_handler_cb_t|ep_close_flags_t|mem_map_params|mem_map_params_t|mem_map_params_field|mem_attr|mem_attr_t|mem_attr_field|request_param_t|op_attr_t|send_nbx_callback_t|am_recv_data_nbx_callback_t|atomic_op_t|am_handler_param|am_handler_param_t|am_handler_param_field|am_recv_callback_t|am_recv_param|am_recv_param_t|am_recv_attr_t|am_cb_flags|send_am_flags|params_field|dt_type)'
vars='UCP_API_(MAJOR|MINOR)|UCP_MEM_MAP_(NONBLOCK|ALLOCATE|FIXED)'
header=$(mktemp --suffix=.h)
trap 'rm -f "$header"' EXIT
echo '#include <ucp/api/ucp.h>' >"$header"
{
  echo "//! Raw UCX bindings (generated; do not edit): bindgen $(bindgen --version | cut -d' ' -f2) over"
  echo "//! \`ucp/api/ucp.h\` of UCX $version by \`scripts/gen-ucx-bindings.sh\`, which lists what"
  echo "//! is let through. The safe layer in the other modules is the only user;"
  echo "//! \`lib.rs\` allows C's naming here."
  echo
  # shellcheck disable=SC2086
  bindgen "$header" \
    --allowlist-function "$functions" \
    --allowlist-type "$types" \
    --allowlist-var "$vars" \
    --default-enum-style consts \
    --no-prepend-enum-name \
    --no-doc-comments \
    --no-layout-tests \
    --no-derive-debug \
    -- $cflags
} >src/sys.rs
rustfmt --edition 2021 src/sys.rs
echo "wrote src/sys.rs ($(wc -l <src/sys.rs) lines) from UCX $version"
