"""load_settings: defaults < config file < TS_* environment (only when enabled) < CLI, and every refusal."""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path

import pytest

from serve.config import Settings, load_settings
from serve.config.keys import CLI_ONLY, READERS
from serve.errors import ConfigError


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # ./config.properties and ./logs are looked up here


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_every_settings_field_has_a_reader() -> None:
    derived = {"snapshot_dir", "config_file", "gpu_uuids"}
    assert {f.name for f in fields(Settings)} == set(READERS) | set(CLI_ONLY) | derived


def test_defaults(tmp_path: Path) -> None:
    s = load_settings({}, {})
    assert s.inference_address == "http://127.0.0.1:8080" and s.metrics_address == "http://127.0.0.1:8082"
    assert (s.job_queue_size, s.max_request_size, s.default_response_timeout) == (100, 6553500, 120)
    assert s.allowed_urls == () and s.metrics_mode == "prometheus" and s.default_workers_per_model == 1
    assert not s.enable_model_api and not s.disable_token_authorization and s.token_expiration_min == 60
    assert s.key_file == tmp_path / "key_file.json" and s.snapshot_dir == tmp_path / "logs" / "config"
    assert s.config_file is None and s.model_snapshot is None


def test_precedence_file_env_cli(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    cfg = write(
        tmp_path / "ts.properties",
        f"enable_envvars_config=true\njob_queue_size=10\nbatch_size=2\nmax_batch_delay=7\nmodel_store={store}\n",
    )
    env = {"TS_JOB_QUEUE_SIZE": "20", "TS_BATCH_SIZE": "3", "TS_TOKEN_EXPIRATION_TIME_MIN": "1.5"}
    s = load_settings({"ts_config": str(cfg), "batch_size": 4}, env)
    assert (s.job_queue_size, s.batch_size, s.max_batch_delay) == (20, 4, 7)
    assert s.token_expiration_min == 1.5 and s.model_store == store and s.config_file == cfg


def test_env_ignored_unless_enabled(tmp_path: Path) -> None:
    write(tmp_path / "config.properties", "job_queue_size=10\n")
    s = load_settings({}, {"TS_JOB_QUEUE_SIZE": "20", "TS_ENABLE_ENVVARS_CONFIG": "true"})
    assert s.job_queue_size == 10 and s.config_file == tmp_path / "config.properties"


def test_env_enabled_from_cli() -> None:
    s = load_settings({"enable_envvars_config": True}, {"TS_METRICS_MODE": "log", "TS_ENABLE_MODEL_API": "true"})
    assert s.metrics_mode == "log" and s.enable_model_api


def test_token_and_model_api_switches_keep_torchserves_order(tmp_path: Path) -> None:
    """TorchServe: env > CLI > file for TS_DISABLE_TOKEN_AUTHORIZATION (its test_token_authorization.py priority
    tests: env false + --disable-token-auth = token auth on) and TS_ENABLE_MODEL_API."""
    write(tmp_path / "config.properties", "enable_envvars_config=true\ndisable_token_authorization=false\n")
    flags = {"disable_token_authorization": True, "enable_model_api": True}
    s = load_settings(flags, {"TS_DISABLE_TOKEN_AUTHORIZATION": "false", "TS_ENABLE_MODEL_API": "false"})
    assert not s.disable_token_authorization and not s.enable_model_api
    assert load_settings(flags, {}).disable_token_authorization  # no env: the flag beats the file
    assert load_settings({}, {"TS_DISABLE_TOKEN_AUTHORIZATION": "true"}).disable_token_authorization  # env > file
    write(tmp_path / "config.properties", "disable_token_authorization=false\n")  # env config off: env ignored
    assert load_settings(flags, {"TS_DISABLE_TOKEN_AUTHORIZATION": "false"}).disable_token_authorization


def test_env_allowed_urls_needs_use_env_allowed_urls(tmp_path: Path) -> None:
    env = {"TS_ALLOWED_URLS": "https://.*"}
    write(tmp_path / "config.properties", "enable_envvars_config=true\nallowed_urls=file:///models/.*\n")
    assert load_settings({}, env).allowed_urls == ("file:///models/.*",)
    write(tmp_path / "config.properties", "enable_envvars_config=true\nuse_env_allowed_urls=true\n")
    assert load_settings({}, env).allowed_urls == ("https://.*",)


def test_models_property_is_not_read_from_env() -> None:
    s = load_settings({"enable_envvars_config": True}, {"TS_MODELS": "{bad json"})
    assert s.models == {}


def test_config_file_lookup_order(tmp_path: Path) -> None:
    a = write(tmp_path / "a.properties", "job_queue_size=1\n")
    b = write(tmp_path / "b.properties", "job_queue_size=2\n")
    write(tmp_path / "config.properties", "job_queue_size=3\n")
    assert load_settings({"ts_config": str(b)}, {"TS_CONFIG_FILE": str(a)}).job_queue_size == 1
    assert load_settings({"ts_config": str(b)}, {}).job_queue_size == 2
    assert load_settings({}, {}).job_queue_size == 3


@pytest.mark.parametrize("where", ["cli", "env"])
def test_named_config_file_must_exist(where: str) -> None:
    cli, env = ({"ts_config": "nope.properties"}, {}) if where == "cli" else ({}, {"TS_CONFIG_FILE": "nope"})
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(cli, env)


def test_dollar_substitution(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    write(tmp_path / "config.properties", "model_store=$$BASE$$/m\ninference_address=http://127.0.0.1:$$PORT$$\n")
    s = load_settings({}, {"BASE": str(tmp_path), "PORT": "9999"})
    assert s.model_store == tmp_path / "m" and s.inference_address == "http://127.0.0.1:9999"
    with pytest.raises(ConfigError, match="PORT, which is not set"):
        load_settings({}, {"BASE": str(tmp_path)})


def test_bad_value_names_key_value_and_source(tmp_path: Path) -> None:
    cfg = write(tmp_path / "config.properties", "job_queue_size=lots\n")
    with pytest.raises(ConfigError) as err:
        load_settings({}, {})
    assert str(err.value) == f"job_queue_size = 'lots' is not valid: expected an integer (from config file {cfg})"
    cfg.unlink()
    with pytest.raises(ConfigError, match=r"'-1' .*\(from environment variable TS_BATCH_SIZE\)"):
        load_settings({"enable_envvars_config": True}, {"TS_BATCH_SIZE": "-1"})
    with pytest.raises(ConfigError, match=r"\(from the command line\)"):
        load_settings({"metrics_mode": "both"}, {})


def test_unknown_cli_setting() -> None:
    with pytest.raises(ConfigError, match="unknown setting"):
        load_settings({"job_queue": 3}, {})


def test_unknown_and_no_effect_keys_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path / "config.properties", "vmargs=-Xmx4g\njob_queu_size=3\n")
    with caplog.at_level(logging.WARNING, logger="serve.config.loader"):
        s = load_settings({}, {})
    assert s.job_queue_size == 100
    assert "vmargs is ignored: a Java/Netty setting" in caplog.text
    assert "unknown key 'job_queu_size'" in caplog.text


def test_model_store_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model_store = .* no such directory"):
        load_settings({"model_store": str(tmp_path / "missing")}, {})


def test_https_needs_key_and_certificate(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="uses https, which needs private_key_file and certificate_file"):
        load_settings({"inference_address": "https://127.0.0.1:8443"}, {})
    key, cert = write(tmp_path / "k.pem", "k"), write(tmp_path / "c.pem", "c")
    cli = {"inference_address": "https://127.0.0.1:8443", "private_key_file": str(key), "certificate_file": str(cert)}
    assert load_settings(cli, {}).private_key_file == key
    with pytest.raises(ConfigError, match=r"certificate_file = .* does not exist"):
        load_settings({**cli, "certificate_file": str(tmp_path / "none.pem")}, {})


def test_log_location_from_environment(tmp_path: Path) -> None:
    write(tmp_path / "config.properties", "log_location=from_file\n")
    s = load_settings({}, {"LOG_LOCATION": str(tmp_path / "env_logs")})
    assert s.log_location == tmp_path / "env_logs" and s.snapshot_dir == tmp_path / "env_logs" / "config"


def test_log_config_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="log4j2 XML"):
        load_settings({"log_config": str(write(tmp_path / "log4j2.xml", "<Configuration/>"))}, {})
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_settings({"log_config": str(write(tmp_path / "log.json", "{"))}, {})
    with pytest.raises(ConfigError, match=r"needs a \[loggers\] section"):
        load_settings({"log_config": str(write(tmp_path / "log.ini", "[x]\na=1\n"))}, {})
    good = write(tmp_path / "ok.json", '{"version": 1}')
    assert load_settings({"log_config": str(good)}, {}).log_config == good


def test_none_cli_values_are_not_given(tmp_path: Path) -> None:
    write(tmp_path / "config.properties", "enable_model_api=true\n")
    assert load_settings({"enable_model_api": None, "model_store": None}, {}).enable_model_api
