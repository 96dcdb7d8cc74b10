"""The configuration keys: which reader checks each one, and TorchServe's keys that have no effect here.

`READERS` covers every `config.properties` key that `Settings` holds (a test checks that they match).
`CLI_ONLY` are Settings fields set only by the command line or the environment. `NO_EFFECT` are TorchServe keys
that mean nothing for this server (JVM, Netty, Java keystores, plugins...): a file that sets them still loads,
with one warning per key saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from serve.config import values as v

READERS: dict[str, Callable[[str, Any], Any]] = {
    "inference_address": v.address,
    "management_address": v.address,
    "metrics_address": v.address,
    "private_key_file": v.optional_path,
    "certificate_file": v.optional_path,
    "grpc_inference_port": v.port_or_0,
    "grpc_management_port": v.port_or_0,
    "grpc_inference_address": v.text,
    "grpc_management_address": v.text,
    "enable_grpc_ssl": v.to_bool,
    "grpc_server": v.choice("serve", "grpcio"),
    "model_store": v.optional_path,
    "workflow_store": v.optional_path,
    "load_models": v.load_models,
    "models": v.models,
    "model_snapshot": v.model_snapshot,
    "default_workers_per_model": v.int_at_least(0),
    "default_service_handler": v.optional_text,
    "job_queue_size": v.int_at_least(1),
    "max_request_size": v.int_at_least(1),
    "max_response_size": v.int_at_least(1),
    "default_response_timeout": v.int_at_least(1),
    "default_startup_timeout": v.int_at_least(1),
    "unregister_model_timeout": v.int_at_least(1),
    "batch_size": v.int_at_least(1),
    "max_batch_delay": v.int_at_least(0),
    "allowed_urls": v.regex_list,
    "use_env_allowed_urls": v.to_bool,
    "disable_token_authorization": v.to_bool,
    "token_expiration_min": v.positive_float,
    "enable_model_api": v.to_bool,
    "cors_allowed_origin": v.optional_text,
    "cors_allowed_methods": v.optional_text,
    "cors_allowed_headers": v.optional_text,
    "metrics_mode": v.choice("prometheus", "log", "legacy"),
    "metrics_config": v.optional_path,
    "metric_time_interval": v.int_at_least(1),
    "disable_system_metrics": v.to_bool,
    "enable_metrics_api": v.to_bool,
    "decode_input_request": v.to_bool,
    "limit_max_image_pixels": v.to_bool,
    "number_of_gpu": v.int_at_least(0),
    "enable_envvars_config": v.to_bool,
    "install_py_dep_per_model": v.to_bool,
    # ours, also accepted in config.properties
    "key_file": v.path,
    "log_location": v.path,
    "log_format": v.choice("text", "json"),
    "max_workers_per_model": v.int_at_least(1),
    "max_workers": v.int_at_least(1),
    "max_header_line_size": v.int_at_least(256),
    "max_header_size": v.int_at_least(256),
    "max_header_count": v.int_at_least(1),
    "header_read_timeout": v.positive_float,
    "keep_alive_timeout": v.positive_float,
    "max_idle_connections": v.int_at_least(1),
    "max_connections": v.int_at_least(0),
    "ports_file": v.optional_path,
    "max_extracted_bytes_total": v.int_at_least(1),
    "worker_memory_limit": v.int_at_least(0),
    "worker_heartbeat_interval": v.positive_float,
    "worker_heartbeat_misses": v.int_at_least(1),
}

CLI_ONLY: dict[str, Callable[[str, Any], Any]] = {
    "ncs": v.to_bool,
    "log_config": v.optional_path,
}

_JVM = "a Java/Netty setting of TorchServe's frontend; serve has no JVM"
_UNSUPPORTED = "not supported by serve"
NO_EFFECT: dict[str, str] = {
    "vmargs": _JVM,
    "number_of_netty_threads": _JVM,
    "netty_client_threads": _JVM,
    "prefer_direct_buffer": _JVM,
    "use_native_io": _JVM,
    "io_ratio": _JVM,
    "async_logging": _JVM,
    "keystore": "Java keystores are not read; set private_key_file and certificate_file (PEM) instead",
    "keystore_pass": "Java keystores are not read; set private_key_file and certificate_file (PEM) instead",
    "keystore_type": "Java keystores are not read; set private_key_file and certificate_file (PEM) instead",
    "plugins_path": "serving-sdk plugins are Java jars; " + _UNSUPPORTED,
    "initial_worker_port": "workers talk to the server over pipes, not ports",
    "initial_distribution_port": "distributed (torchrun) workers are " + _UNSUPPORTED,
    "service_envelope": "request envelopes are " + _UNSUPPORTED,
    "blacklist_env_vars": _UNSUPPORTED,
    "model_metrics_auto_detect": "serve exports every metric a handler records, declared in metrics_config or not "
    "(TorchServe's model_metrics_auto_detect=true)",
    "system_metrics_cmd": "serve reads the host metrics itself (/proc and statvfs, serve/metrics/system_metrics.py); "
    "no command is run",
    "ts_open_inference_protocol": _UNSUPPORTED + " yet (the Open Inference Protocol comes with gRPC)",
    "ts_header_key_sequence_id": "sequence batching uses TorchServe's default header name, ts_request_sequence_id",
    "ts_header_key_sequence_start": "sequence batching uses TorchServe's default header name, "
    "ts_request_sequence_start",
    "ts_header_key_sequence_end": "sequence batching uses TorchServe's default header name, ts_request_sequence_end",
    "ipex_enable": "Intel extensions for PyTorch do not apply: serve does not run PyTorch",
    "ipex_gpu_enable": "Intel extensions for PyTorch do not apply: serve does not run PyTorch",
    "cpu_launcher_enable": _UNSUPPORTED,
    "cpu_launcher_args": _UNSUPPORTED,
    "debug": _UNSUPPORTED + "; set default_response_timeout high and scale to one worker instead",
}
