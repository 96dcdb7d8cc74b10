"""Typed value readers: addresses, numbers, booleans, lists, the models JSON; each bad value is a ConfigError."""

from __future__ import annotations

import pytest

from serve.config import values as v
from serve.config.keys import READERS
from serve.errors import ConfigError


@pytest.mark.parametrize(
    "addr,expected",
    [
        ("http://127.0.0.1:8080", ("127.0.0.1", 8080, False)),
        ("https://0.0.0.0:8443", ("0.0.0.0", 8443, True)),
        ("http://localhost", ("localhost", 80, False)),
        ("https://example.org/", ("example.org", 443, True)),
        ("http://[::1]:9000", ("::1", 9000, False)),
        ("http://127.0.0.1:0", ("127.0.0.1", 0, False)),  # any free port, reported in ports_file
    ],
)
def test_parse_address(addr: str, expected: tuple[str, int, bool]) -> None:
    assert v.parse_address(addr) == expected


@pytest.mark.parametrize(
    "addr",
    ["127.0.0.1:8080", "unix:/tmp/ts.sock", "ftp://h:1", "http://:8080", "http://h:99999",
     "http://h:80/path", "http://h:x"],
)  # fmt: skip
def test_parse_address_refuses(addr: str) -> None:
    with pytest.raises(ConfigError, match="address"):
        v.parse_address(addr)


def test_booleans() -> None:
    for text in ("true", "TRUE", "yes", "on", "1", True):
        assert v.to_bool("k", text) is True
    for text in ("false", "No", "off", "0", False):
        assert v.to_bool("k", text) is False
    with pytest.raises(ConfigError, match=r"k = 'ture' is not valid: expected true or false"):
        v.to_bool("k", "ture")


def test_load_models_entries() -> None:
    assert v.load_models("load_models", "a.mar, b=b.mar,,c.tar.gz") == ("a.mar", "b=b.mar", "c.tar.gz")
    assert v.load_models("load_models", ["x.mar,y.mar", "z=z.mar"]) == ("x.mar", "y.mar", "z=z.mar")
    assert v.load_models("load_models", "ALL") == ("all",)
    with pytest.raises(ConfigError, match="'all' alone"):
        v.load_models("load_models", "all,a.mar")
    with pytest.raises(ConfigError, match="name=archive"):
        v.load_models("load_models", "bad name=a.mar")


def test_split_model_entry() -> None:
    assert v.split_model_entry("digits=digits.mar") == ("digits", "digits.mar")
    assert v.split_model_entry("digits.mar") == (None, "digits.mar")
    assert v.split_model_entry("https://h/m.mar?x=1") == (None, "https://h/m.mar?x=1")


def test_models_json_types_are_checked() -> None:
    good = '{"m": {"1.0": {"defaultVersion": true, "marName": "m.mar", "minWorkers": 2, "extra": [1]}}}'
    assert v.models("models", good)["m"]["1.0"]["minWorkers"] == 2
    for bad, what in [
        ("[1]", "a JSON object"),
        ("{not json", "a JSON object"),
        ('{"m": 3}', "versions for model 'm'"),
        ('{"m": {"1.0": 3}}', "settings for model 'm' version '1.0'"),
        ('{"m": {"1.0": {"minWorkers": "2"}}}', "field minWorkers"),
        ('{"m": {"1.0": {"batchSize": true}}}', "field batchSize"),
        ('{"m": {"1.0": {"defaultVersion": 1}}}', "field defaultVersion"),
    ]:
        with pytest.raises(ConfigError, match=what):
            v.models("models", bad)


def test_model_snapshot_shape() -> None:
    snap = v.model_snapshot("model_snapshot", '{"name": "x.cfg", "modelCount": 0, "models": {}}')
    assert snap["modelCount"] == 0
    with pytest.raises(ConfigError, match="modelCount"):
        v.model_snapshot("model_snapshot", '{"modelCount": "1", "models": {}}')


BAD_VALUES = {
    "inference_address": "localhost:8080",
    "grpc_inference_port": "70700",
    "grpc_inference_address": " ",
    "enable_grpc_ssl": "maybe",
    "grpc_server": "grpc.aio",
    "load_models": "all,x.mar",
    "models": "[]",
    "model_snapshot": "{",
    "default_workers_per_model": "-1",
    "job_queue_size": "0",
    "max_request_size": "6.5MB",
    "default_response_timeout": "0",
    "batch_size": "0",
    "max_batch_delay": "-5",
    "allowed_urls": "file://(.*",
    "token_expiration_min": "0",
    "metrics_mode": "statsd",
    "number_of_gpu": "-1",
    "key_file": "",
    "log_format": "xml",
    "max_workers_per_model": "0",
    "max_workers": "-1",
}


@pytest.mark.parametrize("key", sorted(BAD_VALUES))
def test_bad_values_name_key_and_value(key: str) -> None:
    raw = BAD_VALUES[key]
    with pytest.raises(ConfigError) as err:
        READERS[key](key, raw)
    assert key in str(err.value) and "expected" in str(err.value)


def test_numbers() -> None:
    assert v.int_at_least(1)("k", " 12 ") == 12
    assert v.positive_float("k", "0.5") == 0.5
    for bad in ("1.5", "x", True):
        with pytest.raises(ConfigError, match="an integer"):
            v.int_at_least(0)("k", bad)
    with pytest.raises(ConfigError, match="finite"):
        v.positive_float("k", "inf")
